package pgtest

import "syscall"

// procAttr runs a child as s's user, in its own process group (a ^C
// reaches the test, which stops the server itself), and has the kernel
// send it SIGQUIT (PostgreSQL's immediate shutdown) if the test process
// dies without stopping it.
func (s *Server) procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
}
