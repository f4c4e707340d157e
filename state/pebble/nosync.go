package pebble

import "github.com/cockroachdb/pebble/v2/vfs"

// noSyncFS is the file system of a backend's working directory: fs with
// every file's and directory's Sync a no-op. The working copy is never
// recovered after a crash (New always creates a fresh directory; state
// comes back from checkpoints, which is why the WAL is off as well), so
// durability of its files buys nothing, while pebble syncs each table it
// flushes and the manifest: an incremental checkpoint's synchronous part
// (which flushes the memtables) then waited for the disk. Writes and
// their errors still go through fs; a checkpoint's asynchronous part
// reads the hard-linked files through the page cache.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.Create(name, c))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSyncFile(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) { return noSyncFile(fs.FS.OpenDir(name)) }

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSyncFile(fs.FS.ReuseForWrite(oldname, newname, c))
}

// Unwrap returns the wrapped file system.
func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func noSyncFile(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return unsyncedFile{f}, nil
}

type unsyncedFile struct{ vfs.File }

func (unsyncedFile) Sync() error                             { return nil }
func (unsyncedFile) SyncData() error                         { return nil }
func (unsyncedFile) SyncTo(int64) (fullSync bool, err error) { return true, nil }
