package ha_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/etcdserver"
	"github.com/weirstream/weir/internal/ha"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startEtcd(t *testing.T) *etcdserver.Server {
	t.Helper()
	s, err := etcdserver.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s
}

func dial(t *testing.T, s *etcdserver.Server, job string) *ha.Client {
	t.Helper()
	c, err := ha.Dial(t.Context(), ha.Config{Endpoints: []string{s.Endpoint()}, JobID: job, ElectionTimeout: time.Second,
		RequestTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []ha.Config{
		{JobID: "j"},
		{Endpoints: []string{"x"}},
		{Endpoints: []string{"x"}, JobID: "a/b"},
		{Endpoints: []string{" "}, JobID: "j"},
		{Endpoints: []string{"x"}, JobID: "j", ElectionTimeout: 1500 * time.Millisecond},
		{Endpoints: []string{"x"}, JobID: "j", DialTimeout: -1},
	} {
		require.Error(t, c.Validate(), "%+v", c)
	}
	require.NoError(t, ha.Config{Endpoints: []string{"x"}, JobID: "word-count_1.2"}.Validate())
}

// An etcd that does not answer is an error of Dial, within DialTimeout.
func TestDialUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = ha.Dial(t.Context(), ha.Config{Endpoints: []string{addr}, JobID: "j", DialTimeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, ha.ErrUnreachable)
	require.ErrorContains(t, err, addr)
}

// The leader's writes succeed while it leads; once its lease is revoked
// (as when it is partitioned from etcd long enough) every one of them
// fails, its term ends, and another coordinator is elected with a
// greater epoch.
func TestRevokedLeaderCannotWrite(t *testing.T) {
	s := startEtcd(t)
	a, b := dial(t, s, "job"), dial(t, s, "job")
	la, err := a.Campaign(t.Context(), "a", "addr-a")
	require.NoError(t, err)
	require.NoError(t, la.Reserve(t.Context(), 1))
	require.NoError(t, la.Complete(t.Context(), 1, 0))
	require.NoError(t, la.Reserve(t.Context(), 2))
	rec, err := b.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, ha.Record{Counter: 2, Pointer: &ha.Pointer{ID: 1, Epoch: la.Epoch()}}, rec)
	l, ok, err := b.CurrentLeader(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ha.Leader{ID: "a", Addr: "addr-a", Epoch: la.Epoch()}, l)

	elected := make(chan *ha.Leadership, 1)
	go func() {
		lb, err := b.Campaign(t.Context(), "b", "addr-b")
		if err != nil {
			close(elected)
			return
		}
		elected <- lb
	}()
	changed := b.WatchLeader(t.Context(), la.Epoch())

	// Revoke a's lease behind its back: a keeps running.
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}})
	require.NoError(t, err)
	defer raw.Close()
	resp, err := raw.Get(t.Context(), "/weir/jobs/job/leader/", clientv3.WithFirstCreate()...)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	_, err = raw.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)

	lb := <-elected
	require.NotNil(t, lb)
	require.Greater(t, lb.Epoch(), la.Epoch())
	<-changed
	err = la.Complete(t.Context(), 2, 1)
	require.ErrorIs(t, err, ha.ErrLeadershipLost)
	require.ErrorIs(t, la.Reserve(t.Context(), 3), ha.ErrLeadershipLost)
	<-la.Lost()
	rec, err = b.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, barrierID(1), rec.Pointer.ID, "the deposed leader's completion was not recorded")
	require.Equal(t, barrierID(2), rec.Counter)

	require.NoError(t, lb.Complete(t.Context(), 3, 1))
	require.NoError(t, lb.End(t.Context(), ha.Status{Finished: true}))
	lb.Resign()
	la.Resign()
	rec, err = b.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, &ha.Status{Finished: true}, rec.Status)
}

// A worker waiting for a leader learns that the job ended even when no
// coordinator leads it any more (a leader stops its workers before it
// records the end, then resigns): WaitLeader returns ErrJobEnded instead
// of waiting for a leader that never comes. A leader of an ended job is
// still returned while it leads.
func TestWaitLeaderJobEnded(t *testing.T) {
	s := startEtcd(t)
	a, w := dial(t, s, "job"), dial(t, s, "job")
	// Bounded: without the fix the first WaitLeader never returns.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	la, err := a.Campaign(ctx, "a", "addr-a")
	require.NoError(t, err)
	la.Resign()

	got := make(chan error, 1)
	go func() {
		_, err := w.WaitLeader(ctx)
		got <- err
	}()
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}})
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.Put(ctx, "/weir/jobs/job/status", `{"Finished":true}`)
	require.NoError(t, err)
	require.ErrorIs(t, <-got, ha.ErrJobEnded)

	lb, err := a.Campaign(ctx, "b", "addr-b")
	require.NoError(t, err)
	l, err := w.WaitLeader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", l.ID)
	lb.Resign()
	_, err = w.WaitLeader(ctx)
	require.ErrorIs(t, err, ha.ErrJobEnded)
}

// Two jobs on one etcd have separate records and elections.
func TestJobsAreSeparate(t *testing.T) {
	s := startEtcd(t)
	a, b := dial(t, s, "job-a"), dial(t, s, "job-b")
	la, err := a.Campaign(t.Context(), "a", "addr-a")
	require.NoError(t, err)
	defer la.Resign()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lb, err := b.Campaign(ctx, "b", "addr-b") // not blocked by job-a's leader
	require.NoError(t, err)
	defer lb.Resign()
	require.NoError(t, la.Complete(t.Context(), 7, 0))
	rec, err := b.Read(t.Context())
	require.NoError(t, err)
	require.Nil(t, rec.Pointer)
	l, ok, err := b.CurrentLeader(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "b", l.ID)
}

// etcd lost: the leader cannot prove its leadership and steps down within
// about an election timeout; when etcd returns, a campaign succeeds.
func TestEtcdLostEndsTerm(t *testing.T) {
	s := startEtcd(t)
	a := dial(t, s, "job")
	la, err := a.Campaign(t.Context(), "a", "addr-a")
	require.NoError(t, err)
	start := time.Now()
	s.Stop()
	t.Logf("etcd stopped after %v", time.Since(start))
	select {
	case <-la.Lost():
		t.Logf("stepped down after %v", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("the leader did not step down after etcd was lost")
	}
	require.ErrorIs(t, la.Err(), ha.ErrLeadershipLost)
	require.ErrorIs(t, la.Complete(t.Context(), 1, 0), ha.ErrLeadershipLost)
	la.Resign()
	t.Logf("resigned after %v", time.Since(start))
	require.NoError(t, s.Restart())
	t.Logf("etcd back after %v", time.Since(start))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lb, err := a.Campaign(ctx, "a", "addr-a")
	require.NoError(t, err)
	require.Greater(t, lb.Epoch(), la.Epoch())
	t.Logf("elected after %v", time.Since(start))
	lb.Resign()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("no election after etcd returned")
	}
}

type barrierID = barrier.CheckpointID
