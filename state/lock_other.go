//go:build !unix

package state

import (
	"io"
	"os"
)

// lockFile on a system without flock only creates name: it does not keep
// a second job off the same checkpoint place.
func lockFile(name string) (io.Closer, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
}
