package main

import "syscall"

// procAttr makes a started process die with this one (SIGKILL when its
// parent exits), so that a launcher killed without its cleanup running
// (SIGKILL, a test binary stopped by its runner) leaves no coordinator or
// worker behind holding ports and files.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
