// Package pgtest runs a throwaway PostgreSQL server for tests and
// examples: initdb into a temporary directory, the server on a free port
// of the loopback interface (its unix socket in the same directory),
// max_prepared_transactions=10 and durability off (fsync, synchronous
// commit, full-page writes) for speed. Stop removes everything.
//
// The binaries (initdb, postgres) are looked up on PATH, then under
// /usr/lib/postgresql/*/bin (Debian and Ubuntu, whose packages keep them
// off PATH), /usr/local/pgsql/bin and Homebrew's prefixes. PostgreSQL
// refuses to run as root: run as root, the server runs as the postgres
// user (Debian's package creates it), or else as nobody, in a directory
// that user owns.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned by Start when no PostgreSQL binaries are found.
var ErrNoBinaries = errors.New("pgtest: no PostgreSQL binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin")

// InstallHint says how to get the binaries, for skip messages.
const InstallHint = "install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or put its bin directory on PATH"

// User is the database superuser of the servers Start creates (trust
// authentication, no password); Database is its database.
const (
	User     = "weir"
	Database = "postgres"
)

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir holds the data directory, the socket and the log.
	Dir string

	bin      string // the directory of initdb and postgres
	data     string
	logPath  string
	cred     *syscall.Credential // nil: run as the current user
	cmd      *exec.Cmd
	settings []string // extra -c settings of the next start
	exited   chan struct{}
	waitErr  error
}

// FindBinaries returns the directory holding initdb and postgres, or
// ErrNoBinaries.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql*/bin", "/usr/local/opt/postgresql*/bin"} {
		m, _ := filepath.Glob(pattern)
		// The newest version first: versions sort as numbers.
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		dirs = append(dirs, m...)
	}
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, dir := range dirs {
		_, e1 := os.Stat(filepath.Join(dir, "initdb"))
		_, e2 := os.Stat(filepath.Join(dir, "postgres"))
		if e1 == nil && e2 == nil {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

// versionOf is the first number in a path like /usr/lib/postgresql/15/bin.
func versionOf(path string) int {
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// Start creates a cluster and starts its server; ctx bounds the start.
// The caller must Stop it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, data: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "server.log")}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if err := s.setOwner(); err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", s.data, "-U", User, "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = s.procAttr()
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out.Bytes())
	}
	if s.Port, err = freePort(); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// setOwner picks the user the server runs as when the process is root,
// and hands it the directory.
func (s *Server) setOwner() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return errors.New("pgtest: running as root, and neither a postgres nor a nobody user exists to run the server as")
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("pgtest: user %s: bad uid %q or gid %q", u.Username, u.Uid, u.Gid)
	}
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	// The user must reach the directory (its parents are world-readable
	// temporary directories) and own it.
	if err := os.Chmod(s.Dir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(s.Dir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("pgtest: handing %s to user %s: %w", s.Dir, u.Username, err)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ConnString is a URL that connects to the server's database over TCP.
func (s *Server) ConnString() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Port, Database)
}

// ConnStringDB is ConnString for another database.
func (s *Server) ConnStringDB(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Port, db)
}

// start runs the server and waits until it accepts connections.
func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.Port),
		"-k", s.Dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_prepared_transactions=10", "-c", "max_connections=100",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB", "-c", "log_min_messages=warning", "-c", "logging_collector=off")
	for _, set := range s.settings {
		cmd.Args = append(cmd.Args, "-c", set)
	}
	cmd.SysProcAttr = s.procAttr()
	cmd.Stdout, cmd.Stderr = logf, logf // files: no copying goroutines
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: starting postgres: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		s.waitErr = cmd.Wait()
		close(exited)
	}(s.exited)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.ConnString())
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgtest: postgres exited at start (%v): %s", s.waitErr, s.logTail())
		case <-ctx.Done():
			s.stop(syscall.SIGQUIT)
			return fmt.Errorf("pgtest: postgres not accepting connections: %w (last: %v): %s", ctx.Err(), err, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop signals the server and waits for it to exit (SIGINT: fast
// shutdown, SIGQUIT: immediate, SIGKILL after 30 s either way).
func (s *Server) stop(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Down stops the server (a fast shutdown: open transactions are rolled
// back, prepared ones kept, connections closed) until Up.
func (s *Server) Down() { s.stop(syscall.SIGINT) }

// Up starts the server again, on the same port, after Down.
func (s *Server) Up(ctx context.Context) error {
	if s.cmd != nil {
		return errors.New("pgtest: server running already")
	}
	return s.start(ctx)
}

// Restart takes the server down, waits for down, and starts it again.
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	s.Down()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return s.Up(ctx)
}

// RestartWith restarts the server at once with settings (name=value)
// overriding the defaults until the next restart, as for
// max_prepared_transactions=0.
func (s *Server) RestartWith(ctx context.Context, settings ...string) error {
	s.Down()
	s.settings = settings
	return s.Up(ctx)
}

// Stop shuts the server down and removes its directory.
func (s *Server) Stop() error {
	s.stop(syscall.SIGINT)
	return os.RemoveAll(s.Dir)
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}
