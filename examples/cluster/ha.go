package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/weirstream/weir/internal/etcdserver"
	"github.com/weirstream/weir/internal/ha"
)

// runHA runs the job highly available on this machine: an etcd server in
// this process, two coordinator processes and two worker processes. It
// SIGKILLs the leading coordinator kills times, each time once the leader
// completed a checkpoint, starts a replacement so that two stand, and
// reports how long after each kill the next leader completed its first
// checkpoint. The counts are then checked as without -ha.
func runHA(ctx context.Context, p params, kills, top int) error {
	_, err := runHAWith(ctx, p, kills, top, nil)
	return err
}

// runHAWith is runHA that waits delay() (nil: none) after the leader's
// checkpoint before each kill, and returns the failover times.
func runHAWith(ctx context.Context, p params, kills, top int, delay func() time.Duration) (failovers []time.Duration, err error) {
	tmp, err := os.MkdirTemp("", "weir-cluster-ha-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if p.out == "" {
		p.out = filepath.Join(tmp, "out")
	}
	var objects *objectStore
	if p.objects {
		if objects, err = startObjectStore(&p); err != nil {
			return nil, err
		}
		defer objects.close()
	}
	if p.chk == "" {
		p.chk = filepath.Join(tmp, "checkpoints")
	}
	if p.token == "" {
		p.token = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if kills > 0 && p.rate == 0 {
		// Time for each kill: an election timeout, a restore and a
		// checkpoint of the new leader, with room to spare.
		secs := 2 + int64(kills)*(2*int64(p.election/time.Second)+1)
		p.rate = int(p.lines / secs)
	}
	etcd, err := etcdserver.Start(filepath.Join(tmp, "etcd"))
	if err != nil {
		return nil, err
	}
	defer etcd.Stop()
	p.etcd = etcd.Endpoint()
	if p.job == "" {
		p.job = "wordcount"
	}
	hc, err := ha.Dial(ctx, ha.Config{Endpoints: []string{p.etcd}, JobID: p.job})
	if err != nil {
		return nil, err
	}
	defer hc.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	fmt.Printf("etcd on %s; starting 2 coordinator and 2 worker processes (job %s)\n", p.etcd, p.job)
	procs := &workers{self: self, args: p.args()}
	if objects != nil {
		procs.env = objects.env
	}
	defer procs.stop()
	coordinators := 0
	startCoordinator := func() error {
		coordinators++
		id := fmt.Sprintf("coordinator-%d", coordinators)
		return procs.startAs(id, "-role", "coordinator", "-id", id)
	}
	for range 2 {
		if err := startCoordinator(); err != nil {
			return nil, err
		}
	}
	for _, id := range []string{"worker-1", "worker-2"} {
		if err := procs.startAs(id, "-role", "worker", "-id", id); err != nil {
			return nil, err
		}
	}
	for i := 0; i < kills; i++ {
		l, ptr, err := awaitCheckpointBy(ctx, hc, 0)
		if err != nil {
			return nil, fmt.Errorf("kill %d: %w", i+1, err)
		}
		if ptr == 0 {
			return nil, fmt.Errorf("the job ended after %d of %d coordinator kills: run it longer (-lines, -rate)", i, kills)
		}
		if delay != nil {
			time.Sleep(delay())
		}
		fmt.Printf("leader %s (epoch %d) completed checkpoint %d: killing it with SIGKILL\n", l.ID, l.Epoch, ptr)
		killed := time.Now()
		procs.kill(l.ID)
		if err := startCoordinator(); err != nil {
			return nil, err
		}
		nl, nptr, err := awaitCheckpointBy(ctx, hc, l.Epoch)
		if err != nil {
			return nil, fmt.Errorf("after kill %d: %w", i+1, err)
		}
		if nptr == 0 {
			return nil, fmt.Errorf("the job ended before a new leader completed a checkpoint after kill %d", i+1)
		}
		d := time.Since(killed)
		failovers = append(failovers, d)
		fmt.Printf("leader %s (epoch %d) completed checkpoint %d %v after the kill\n", nl.ID, nl.Epoch, nptr, d.Round(time.Millisecond))
	}
	if err := awaitEnd(ctx, hc); err != nil {
		return nil, err
	}
	if err := procs.wait(30 * time.Second); err != nil {
		return nil, err
	}
	for i, d := range failovers {
		fmt.Printf("failover %d: %v from SIGKILL to the new leader's first checkpoint (election timeout %v)\n",
			i+1, d.Round(time.Millisecond), p.election)
	}
	if objects != nil {
		if err := objects.report(); err != nil {
			return nil, err
		}
	}
	return failovers, check(p, top, time.Since(start))
}

// awaitCheckpointBy waits until a leader of an epoch after the given one
// completed a checkpoint, and returns that leader and the checkpoint's ID
// (0: the job ended first).
func awaitCheckpointBy(ctx context.Context, hc *ha.Client, after uint64) (ha.Leader, uint64, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		rec, err := hc.Read(ctx)
		if err == nil && rec.Status != nil {
			return ha.Leader{}, 0, nil
		}
		if err == nil && rec.Pointer != nil && rec.Pointer.Epoch > after {
			l, ok, lerr := hc.CurrentLeader(ctx)
			if lerr == nil && ok && l.Epoch == rec.Pointer.Epoch {
				return l, uint64(rec.Pointer.ID), nil
			}
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ha.Leader{}, 0, ctx.Err()
		}
	}
	return ha.Leader{}, 0, errors.New("no checkpoint of a new leader within 2 minutes")
}

// awaitEnd waits until etcd records the job's end.
func awaitEnd(ctx context.Context, hc *ha.Client) error {
	for {
		rec, err := hc.Read(ctx)
		if err == nil && rec.Status != nil {
			if !rec.Status.Finished {
				return fmt.Errorf("the job failed: %s", rec.Status.Error)
			}
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
