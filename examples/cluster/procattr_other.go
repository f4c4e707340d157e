//go:build !linux

package main

import "syscall"

// procAttr: only Linux has a parent-death signal; elsewhere a launcher
// killed without its cleanup leaves its processes running.
func procAttr() *syscall.SysProcAttr { return nil }
