package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/etcdserver"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/jobmaster"
)

// Two coordinator processes and two workers on an etcd in this process,
// their checkpoints on an S3 server in it (-ha -storage s3, the
// deployment of examples/cluster/k8s; make soak-ha runs the same kills on
// a checkpoint directory); the leading coordinator is SIGKILLed twice
// mid-job (each time once it completed a checkpoint) and a new one
// starts: the job completes, and check verifies every word was committed
// exactly once.
func TestHAKilledCoordinatorsExactlyOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := runHA(ctx, params{lines: 30000, par: 2, election: time.Second, objects: true}, 2, 3); err != nil {
		t.Fatal(err)
	}
}

// haJob runs the example's job highly available inside the test process:
// coordinators and workers as goroutines, so that the test can cut their
// etcd access or stop etcd.
type haJob struct {
	t    *testing.T
	p    params
	etcd *etcdserver.Server
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs map[string]error
	lost map[string]int // terms that ended before the job, by coordinator
	log  *zap.Logger    // on the test's log, shown when it fails
}

func newHAJob(t *testing.T, lines int64, rate int) *haJob {
	dir := t.TempDir()
	e, err := etcdserver.Start(filepath.Join(dir, "etcd"))
	require.NoError(t, err)
	t.Cleanup(e.Stop)
	p := params{lines: lines, par: 2, rate: rate, out: filepath.Join(dir, "out"), chk: filepath.Join(dir, "chk"),
		token: "t", etcd: e.Endpoint(), job: "job-" + strconv.Itoa(os.Getpid()), election: 2 * time.Second}
	return &haJob{t: t, p: p, etcd: e, errs: map[string]error{}, lost: map[string]int{}, log: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))}
}

func (j *haJob) done(name string, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.errs[name] = err
}

// coordinator runs one coordinator; like -role coordinator it stands
// again after a term that ended before the job (restands false: it
// returns ErrLeadershipLost).
func (j *haJob) coordinator(ctx context.Context, id string, restands bool) {
	j.wg.Go(func() {
		for {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				j.done(id, err)
				return
			}
			_, err = build(j.p, weir.WithLogger(j.log.Named(id)), weir.WithCluster(weir.ClusterConfig{
				Listener: ln, Workers: 2, Token: j.p.token, WorkerTimeout: 30 * time.Second,
				HA: j.p.haConfig(id, "")})).Execute(ctx)
			if restands && errors.Is(err, weir.ErrLeadershipLost) && ctx.Err() == nil {
				j.mu.Lock()
				j.lost[id]++
				j.mu.Unlock()
				continue
			}
			j.done(id, err)
			return
		}
	})
}

func (j *haJob) worker(ctx context.Context, id string) {
	j.wg.Go(func() {
		j.done(id, build(j.p, weir.WithLogger(j.log.Named(id))).RunWorker(ctx, weir.WorkerConfig{ID: id, Token: j.p.token,
			HA: j.p.haConfig("", "")}))
	})
}

func (j *haJob) client() *ha.Client {
	c, err := ha.Dial(j.t.Context(), ha.Config{Endpoints: []string{j.p.etcd}, JobID: j.p.job})
	require.NoError(j.t, err)
	j.t.Cleanup(func() { c.Close() })
	return c
}

// startLedByA starts coordinator a, waits until it leads, then starts
// coordinator b and two workers; it returns a's leadership.
func (j *haJob) startLedByA(ctx context.Context, hc *ha.Client) ha.Leader {
	j.coordinator(ctx, "a", true)
	l, err := hc.WaitLeader(ctx)
	require.NoError(j.t, err)
	require.Equal(j.t, "a", l.ID)
	j.coordinator(ctx, "b", true)
	j.worker(ctx, "w1")
	j.worker(ctx, "w2")
	return l
}

// revokeLeader revokes the lease of the leader's election key in etcd,
// as the end of a leader cut off from etcd for an election timeout.
func (j *haJob) revokeLeader(ctx context.Context) error {
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{j.p.etcd}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer raw.Close()
	resp, err := raw.Get(ctx, "/weir/jobs/"+j.p.job+"/leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 {
		return fmt.Errorf("%d leader keys, want 1", len(resp.Kvs))
	}
	_, err = raw.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

// wait waits for every goroutine and returns their results and the
// coordinators' lost terms.
func (j *haJob) wait() (map[string]error, map[string]int) {
	j.wg.Wait()
	return j.errs, j.lost
}

// A leader whose lease is revoked while it keeps running (as a leader
// cut off from etcd for an election timeout) cannot complete a
// checkpoint or commit: its transactions fail, it steps down with
// ErrLeadershipLost, the other coordinator takes over, and every word is
// committed exactly once.
func TestHARevokedLeaderCannotCommit(t *testing.T) {
	t.Parallel()
	j := newHAJob(t, 4000, 500)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hc := j.client()
	l := j.startLedByA(ctx, hc)
	_, ptr, err := awaitCheckpointBy(ctx, hc, 0)
	require.NoError(t, err)
	require.NotZero(t, ptr, "the job ended before a checkpoint")

	require.NoError(t, j.revokeLeader(ctx))

	_, nptr, err := awaitCheckpointBy(ctx, hc, l.Epoch)
	require.NoError(t, err)
	require.NotZero(t, nptr)
	errs, lost := j.wait()
	require.Positive(t, lost["a"], "a's term did not end with ErrLeadershipLost")
	for id, err := range errs {
		require.NoError(t, err, id)
	}
	require.NoError(t, check(j.p, 0, 0))
}

// A leader records the job's end before it tells its workers to shut
// down: each worker follows the one leader once and stops, rather than
// look for a next leader of a job whose end is not yet recorded.
func TestHAWorkersFindTheEnd(t *testing.T) {
	t.Parallel()
	j := newHAJob(t, 2000, 0)
	core, logs := observer.New(zap.InfoLevel)
	j.log = zap.New(zapcore.NewTee(j.log.Core(), core))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	j.coordinator(ctx, "a", false)
	j.worker(ctx, "w1")
	j.worker(ctx, "w2")
	errs, _ := j.wait()
	for id, err := range errs {
		require.NoError(t, err, id)
	}
	for _, w := range []string{"w1", "w2"} {
		require.Len(t, logs.FilterLoggerName(w).FilterMessage("following leader").All(), 1, w)
	}
	require.NoError(t, check(j.p, 0, 0))
}

// The leader loses its term after the job ended and before it recorded
// the end in etcd (its lease is revoked there, by the hook): the workers
// look for the next leader, the other coordinator takes over from the
// job's final checkpoint, finds every task finished and records the end;
// every word is committed exactly once. Not parallel: the hook is the
// process's.
func TestHALeaderLostBeforeRecordingEnd(t *testing.T) {
	j := newHAJob(t, 4000, 0)
	j.p.job += "-end"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var hooked []ha.Status
	var hookErr error
	restore := jobmaster.SetBeforeEndHook(func(job string, s ha.Status) {
		if job != j.p.job || len(hooked) > 0 {
			return // the second leader records the end
		}
		hooked = append(hooked, s)
		hookErr = j.revokeLeader(ctx)
	})
	defer restore()

	hc := j.client()
	j.startLedByA(ctx, hc)
	errs, lost := j.wait()
	require.NoError(t, hookErr)
	require.Len(t, hooked, 1, "no leader saw the job end")
	require.True(t, hooked[0].Finished, "the first leader saw the job fail: %s", hooked[0].Error)
	require.Positive(t, lost["a"], "a's term did not end with ErrLeadershipLost")
	for id, err := range errs {
		require.NoError(t, err, id)
	}
	rec, err := hc.Read(ctx)
	require.NoError(t, err)
	require.NotNil(t, rec.Status, "no leader recorded the end")
	require.True(t, rec.Status.Finished, rec.Status.Error)
	require.NoError(t, check(j.p, 0, 0))
}

// etcd lost during the job: the leader cannot prove its leadership and
// steps down; no coordinator leads until etcd returns; then one takes
// over and the job completes exactly once.
func TestHAEtcdLost(t *testing.T) {
	t.Parallel()
	j := newHAJob(t, 4000, 500)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hc := j.client()
	j.coordinator(ctx, "a", true)
	j.coordinator(ctx, "b", true)
	j.worker(ctx, "w1")
	j.worker(ctx, "w2")
	l, ptr, err := awaitCheckpointBy(ctx, hc, 0)
	require.NoError(t, err)
	require.NotZero(t, ptr, "the job ended before a checkpoint")
	j.etcd.Stop()
	time.Sleep(3 * time.Second) // longer than the election timeout
	require.NoError(t, j.etcd.Restart())
	_, nptr, err := awaitCheckpointBy(ctx, hc, l.Epoch)
	require.NoError(t, err)
	require.NotZero(t, nptr)
	errs, lost := j.wait()
	require.Positive(t, lost["a"]+lost["b"], "no term ended with ErrLeadershipLost")
	for id, err := range errs {
		require.NoError(t, err, id)
	}
	require.NoError(t, check(j.p, 0, 0))
}

// An etcd that does not answer at start is an error of Execute.
func TestHAEtcdUnreachableAtStart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = build(params{lines: 10, par: 1, out: t.TempDir(), chk: t.TempDir()}, weir.WithCluster(weir.ClusterConfig{
		Listen: "127.0.0.1:0", HA: &weir.HAConfig{Endpoints: []string{addr}, JobID: "j", DialTimeout: 300 * time.Millisecond}})).
		Execute(t.Context())
	require.ErrorContains(t, err, "etcd unreachable")
	require.ErrorContains(t, err, addr)
}

// The checkpoint etcd points to lost its metadata: the new leader's
// Execute fails naming it, and does not fall back to an older checkpoint
// (the job's file sink commits in two phases: the lost checkpoint's
// transactions may have been committed).
func TestHAPointerWithoutMetadata(t *testing.T) {
	t.Parallel()
	j := newHAJob(t, 4000, 500)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	hc := j.client()
	actx, stopA := context.WithCancel(ctx)
	j.coordinator(actx, "a", false)
	wctx, stopW := context.WithCancel(ctx)
	j.worker(wctx, "w1")
	j.worker(wctx, "w2")
	_, ptr, err := awaitCheckpointBy(ctx, hc, 0)
	require.NoError(t, err)
	require.NotZero(t, ptr)
	stopA() // resigns; the job stays unfinished in etcd
	stopW()
	j.wait()
	rec, err := hc.Read(ctx)
	require.NoError(t, err)
	require.Nil(t, rec.Status)
	meta := filepath.Join(j.p.chk, j.p.job, "chk-"+strconv.FormatUint(uint64(rec.Pointer.ID), 10), "_metadata")
	require.NoError(t, os.Remove(meta))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, err = build(j.p, weir.WithLogger(zap.NewNop()), weir.WithCluster(weir.ClusterConfig{
		Listener: ln, Workers: 2, Token: j.p.token, HA: j.p.haConfig("b", "")})).Execute(ctx)
	require.ErrorContains(t, err, "checkpoint "+strconv.FormatUint(uint64(rec.Pointer.ID), 10)+", which etcd's /weir/jobs/"+j.p.job+"/checkpoint points to")
	require.ErrorContains(t, err, j.p.chk)
	require.ErrorContains(t, err, "not falling back")
}
