//go:build !linux

package pgtest

import "syscall"

// procAttr runs a child as s's user, in its own process group.
func (s *Server) procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
}
