//go:build unix

package state

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock of name. flock locks
// belong to the open file, so two jobs in one process exclude each other
// as two processes do; the kernel releases the lock when the process dies.
func lockFile(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, err
	}
	return &osLock{f: f}, nil
}

type osLock struct {
	f    *os.File
	once sync.Once
	err  error
}

// Close releases the lock (closing the file releases the flock).
func (l *osLock) Close() error {
	l.once.Do(func() { l.err = l.f.Close() })
	return l.err
}
