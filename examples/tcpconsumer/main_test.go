package main

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// build compiles the command in dir into tmp, with the race detector when
// this test has it (the packages are then already compiled for the test).
func build(t *testing.T, tmp, dir, name string) string {
	t.Helper()
	bin := filepath.Join(tmp, name)
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, dir)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// tcpproducer and tcpconsumer work together with their defaults (only the
// port is left to the system, so that parallel runs do not collide): the
// consumer reads and checks every record and both exit 0.
func TestProducerAndConsumerWithDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	tmp := t.TempDir()
	producer, consumer := build(t, tmp, "../tcpproducer", "tcpproducer"), build(t, tmp, ".", "tcpconsumer")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang
	defer cancel()

	p := exec.CommandContext(ctx, producer, "-listen", "127.0.0.1:0")
	stdout, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var perr strings.Builder
	p.Stderr = &perr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		_ = p.Process.Kill()
		_ = p.Wait()
		t.Fatalf("producer's first line %q (%v); stderr: %s", line, err, perr.String())
	}

	out, cerr := exec.CommandContext(ctx, consumer, "-connect", addr).CombinedOutput()
	if perr := p.Wait(); perr != nil {
		t.Errorf("producer: %v", perr)
	}
	if cerr != nil {
		t.Fatalf("consumer: %v\n%s", cerr, out)
	}
	if !strings.HasPrefix(string(out), "ok: 1000000 records of 8 bytes from 4 subpartitions") {
		t.Fatalf("consumer's output: %s", out)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
