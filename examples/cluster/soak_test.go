//go:build soak

package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var soakRuns = flag.Int("soak.runs", 5, "runs of the coordinator-kill soak")

// TestSoakHA is the coordinator-kill soak (make soak-ha): SOAK_RUNS runs
// of the -ha job, each seeded: 1 to 3 SIGKILLs of the leading
// coordinator, each after a random delay past the leader's latest
// checkpoint (so kills land at any point of a checkpoint's life), the
// counts checked exactly every time. It prints the totals and the
// failover times.
func TestSoakHA(t *testing.T) {
	var ok, failed, kills int
	var failovers []time.Duration
	for seed := range *soakRuns {
		rnd := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		n := 1 + rnd.IntN(3)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		res, err := runHAWith(ctx, params{lines: int64(3000 * (n + 1)), par: 2, election: 2 * time.Second}, n, 0,
			func() time.Duration { return time.Duration(rnd.IntN(400)) * time.Millisecond })
		cancel()
		if err != nil {
			failed++
			t.Errorf("seed %d (%d kills): %v", seed, n, err)
			continue
		}
		ok++
		kills += len(res)
		failovers = append(failovers, res...)
	}
	slices.Sort(failovers)
	fmt.Printf("soak ha: runs=%d ok=%d failed=%d coordinator-kills=%d\n", *soakRuns, ok, failed, kills)
	if len(failovers) > 0 {
		fmt.Printf("soak ha: SIGKILL to the new leader's first checkpoint: min %v median %v max %v (election timeout 2s, interval 200ms)\n",
			failovers[0].Round(time.Millisecond), failovers[len(failovers)/2].Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
	}
}
