package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
)

// The bucket and key prefix of -storage s3's checkpoints.
const (
	s3Bucket = "weir"
	s3Prefix = "wordcount"
)

// objectStore is -storage s3: an S3 server in this process (gofakes3
// over loopback HTTP, internal/s3test) that holds the job's checkpoints.
// Every process of the job reaches it as it would reach S3 or MinIO: the
// processes this one starts through the standard AWS_* environment
// (endpoint, region, credentials) and -chk s3://weir/wordcount, the
// coordinator in this process through the same settings in an
// s3.Config.
type objectStore struct {
	srv *s3test.Server
	env []string
	// Counters (faults that inject nothing): completed checkpoints'
	// metadata objects, state objects written, objects read.
	metas, puts, gets *s3test.Fault
}

// startObjectStore starts the server and points p's checkpoints at it.
func startObjectStore(p *params) (*objectStore, error) {
	srv, err := s3test.Start(s3Bucket)
	if err != nil {
		return nil, err
	}
	p.chk = s3.Scheme + s3Bucket + "/" + s3Prefix
	// AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL, and a session token
	// or profile of the caller's environment must not reach the server.
	env := []string{"AWS_ENDPOINT_URL_S3=" + srv.URL, "AWS_SESSION_TOKEN=", "AWS_PROFILE="}
	for k, v := range srv.Env() {
		env = append(env, k+"="+v)
	}
	isMeta := s3test.KeyContains("/" + state.MetadataFile)
	o := &objectStore{srv: srv, env: env}
	o.metas = srv.Inject(&s3test.Fault{Match: s3test.And(s3test.IsPut, isMeta)})
	o.puts = srv.Inject(&s3test.Fault{Match: func(r *http.Request) bool {
		return (s3test.IsPut(r) || s3test.IsPart(r)) && !isMeta(r)
	}})
	o.gets = srv.Inject(&s3test.Fault{Match: s3test.IsGet})
	return o, nil
}

// open opens the storage of job jobID for a coordinator in this process.
func (o *objectStore) open(ctx context.Context, jobID string) (*s3.Storage, error) {
	cfg := s3.Config{Bucket: s3Bucket, Prefix: s3Prefix, JobID: jobID, Endpoint: o.srv.URL, Region: "us-east-1",
		AccessKeyID: s3test.AccessKeyID, SecretAccessKey: s3test.SecretAccessKey}
	return s3.New(ctx, cfg)
}

// report prints what the job wrote to and read from the bucket, and
// fails unless a checkpoint completed there (a metadata object was
// written): the checkpoints went to object storage, not elsewhere. A
// finished job discards its checkpoints, so the bucket must then be
// empty: report lists and fails on any object left (with -ha, a new
// leader discards what killed leaders left: see the README).
func (o *objectStore) report() error {
	keys, err := o.srv.Keys(s3Bucket, s3Prefix+"/")
	if err != nil {
		return err
	}
	metas := o.srv.Hits(o.metas)
	fmt.Printf("object storage s3://%s/%s: %d checkpoint metadata objects written, %d state uploads, %d reads, %d objects left\n",
		s3Bucket, s3Prefix, metas, o.srv.Hits(o.puts), o.srv.Hits(o.gets), len(keys))
	for _, k := range keys {
		fmt.Printf("  left: s3://%s/%s\n", s3Bucket, k)
	}
	if metas == 0 {
		return fmt.Errorf("no checkpoint completed in s3://%s/%s", s3Bucket, s3Prefix)
	}
	if len(keys) > 0 {
		return fmt.Errorf("the finished job left %d objects in s3://%s/%s", len(keys), s3Bucket, s3Prefix)
	}
	return nil
}

func (o *objectStore) close() error { return o.srv.Close() }

// storageFlag checks -storage.
func storageFlag(v string) (objects bool, err error) {
	switch v {
	case "", "file":
		return false, nil
	case "s3":
		return true, nil
	}
	return false, errors.New(`-storage: want file or s3`)
}
