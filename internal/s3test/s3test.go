// Package s3test serves the S3 API in the process, over real HTTP on the
// loopback interface, for the tests of checkpoints on object storage and
// for examples/cluster -storage s3: gofakes3 on an in-memory backend,
// behind a thin handler that checks the access key and injects the faults
// a test asks for (failed requests, slow responses). Nothing else imports
// it.
package s3test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// The credentials the server accepts.
const (
	AccessKeyID     = "weir-test-key"
	SecretAccessKey = "weir-test-secret"
)

// Server is an S3 endpoint in the process.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:port.
	URL     string
	backend *s3mem.Backend
	srv     *http.Server
	ln      net.Listener
	served  chan struct{}

	mu struct {
		sync.Mutex
		faults []*Fault
	}
}

// A Fault makes the requests it matches fail with Status (if not 0) after
// Delay. Match, if set, picks the requests; Times, if positive, is how
// many it hits before it stops matching.
type Fault struct {
	Match  func(r *http.Request) bool
	Status int
	Delay  time.Duration
	Times  int

	hits int
}

// Hits returns how many requests the fault hit.
func (s *Server) Hits(f *Fault) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f.hits
}

// Start serves the S3 API on a loopback port with the given buckets.
func Start(buckets ...string) (*Server, error) {
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("s3test: create bucket %s: %w", b, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), backend: be, ln: ln, served: make(chan struct{})}
	fake := gofakes3.New(be, gofakes3.WithTimeSkewLimit(0))
	s.srv = &http.Server{Handler: s.handler(fake.Server()), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops the server and closes its connections.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.served
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// CreateBucket adds a bucket.
func (s *Server) CreateBucket(name string) error { return s.backend.CreateBucket(name) }

// Env is the environment that points the AWS chain at the server.
func (s *Server) Env() map[string]string {
	return map[string]string{
		"AWS_ENDPOINT_URL":      s.URL,
		"AWS_ACCESS_KEY_ID":     AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": SecretAccessKey,
		"AWS_REGION":            "us-east-1",
	}
}

// Inject adds a fault; Clear removes them all.
func (s *Server) Inject(f *Fault) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.faults = append(s.mu.faults, f)
	return f
}

// Clear removes every fault.
func (s *Server) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.faults = nil
}

func (s *Server) fault(r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.mu.faults {
		if f.Times > 0 && f.hits >= f.Times {
			continue
		}
		if f.Match == nil || f.Match(r) {
			f.hits++
			return f
		}
	}
	return nil
}

// accessKey returns the access key ID a signed request names.
func accessKey(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	if _, cred, ok := strings.Cut(auth, "Credential="); ok {
		id, _, _ := strings.Cut(cred, "/")
		return id
	}
	if id := r.URL.Query().Get("X-Amz-Credential"); id != "" {
		id, _, _ = strings.Cut(id, "/")
		return id
	}
	return ""
}

func (s *Server) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if accessKey(r) != AccessKeyID {
			writeError(w, http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
			return
		}
		if f := s.fault(r); f != nil {
			if f.Delay > 0 {
				select {
				case <-time.After(f.Delay):
				case <-r.Context().Done():
					return
				}
			}
			if f.Status != 0 {
				writeError(w, f.Status, "InternalError", "s3test: injected fault")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
}

// IsPut, IsGet, IsPart and HasKey are Match helpers.
func IsPut(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == ""
}

// IsGet matches object reads.
func IsGet(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == ""
}

// IsPart matches the upload of a multipart upload's part.
func IsPart(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") != ""
}

// KeyContains matches requests whose path contains sub.
func KeyContains(sub string) func(*http.Request) bool {
	return func(r *http.Request) bool { return strings.Contains(r.URL.Path, sub) }
}

// And matches requests all of ms match.
func And(ms ...func(*http.Request) bool) func(*http.Request) bool {
	return func(r *http.Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
}

// Keys lists the keys of bucket that start with prefix.
func (s *Server) Keys(bucket, prefix string) ([]string, error) {
	p := gofakes3.NewPrefix(&prefix, nil)
	list, err := s.backend.ListBucket(bucket, &p, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	return keys, nil
}

// Get returns an object's bytes.
func (s *Server) Get(bucket, key string) ([]byte, error) {
	o, err := s.backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, err
	}
	defer o.Contents.Close()
	return io.ReadAll(o.Contents)
}

// Put writes an object (a test's corruption of a state file).
func (s *Server) Put(bucket, key string, data []byte) error {
	_, err := s.backend.PutObject(bucket, key, map[string]string{}, bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// Delete removes an object (a test's missing state file).
func (s *Server) Delete(bucket, key string) error {
	_, err := s.backend.DeleteObject(bucket, key)
	return err
}
