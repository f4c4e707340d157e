package weirtest

import (
	"path"
	"strings"
	"sync/atomic"

	"github.com/weirstream/weir/state"
)

// faultFS is the file system of a run's checkpoint storage: an in-memory
// state.FS that fails, tears, delays or corrupts the operations on state
// files the plan says (the metadata file, which completes a checkpoint, is
// left alone: a failure there is a failed checkpoint like any other).
type faultFS struct {
	state.FS
	h *injector
}

// stateFile reports whether name is a checkpoint's state file.
func stateFile(name string) bool {
	base := path.Base(strings.ReplaceAll(name, `\`, "/"))
	return base != state.MetadataFile && !strings.HasPrefix(base, "."+state.MetadataFile)
}

// due fires the first fault of kind due at count n.
func (fs *faultFS) due(ctr *atomic.Int64, kinds ...FaultKind) (Fault, bool) {
	n := ctr.Add(1)
	for i, f := range fs.h.faults {
		for _, k := range kinds {
			if f.Kind == k && n >= f.At && fs.h.fire(i) {
				return f, true
			}
		}
	}
	return Fault{}, false
}

func (fs *faultFS) Create(name string) (state.File, error) {
	if !stateFile(name) {
		fs.h.firstFiles.CompareAndSwap(0, fs.h.creates.Load())
		return fs.FS.Create(name)
	}
	if f, ok := fs.due(&fs.h.creates, WriteError); ok {
		return nil, &InjectedError{f}
	}
	file, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: fs}, nil
}

func (fs *faultFS) Open(name string) (state.File, error) {
	if !stateFile(name) {
		return fs.FS.Open(name)
	}
	f, ok := fs.due(&fs.h.opens, ReadError, CorruptRead, SlowRead)
	switch {
	case ok && f.Kind == ReadError:
		return nil, &InjectedError{f}
	case ok && f.Kind == SlowRead:
		fs.h.sleep(f.Delay)
		ok = false
	}
	file, err := fs.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: fs, corrupt: ok}, nil
}

// faultFile is a state file of the faultFS.
type faultFile struct {
	state.File
	fs      *faultFS
	corrupt bool // flip a bit of the first bytes read
}

func (f *faultFile) Write(p []byte) (int, error) {
	fault, ok := f.fs.due(&f.fs.h.writes, TornWrite, SlowWrite)
	switch {
	case ok && fault.Kind == TornWrite:
		n, _ := f.File.Write(p[:len(p)/2])
		return n, &InjectedError{fault}
	case ok && fault.Kind == SlowWrite:
		f.fs.h.sleep(fault.Delay)
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if fault, ok := f.fs.due(&f.fs.h.syncs, SyncError); ok {
		return &InjectedError{fault}
	}
	return f.File.Sync()
}

func (f *faultFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.flip(p[:n])
	return n, err
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.flip(p[:n])
	return n, err
}

// flip corrupts the first non-empty read of a corrupt file.
func (f *faultFile) flip(p []byte) {
	if f.corrupt && len(p) > 0 {
		p[len(p)/2] ^= 0x10
		f.corrupt = false
	}
}
