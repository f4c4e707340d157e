package main

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as the worker program: the coordinator starts
// os.Executable() with worker flags, and the environment variable set by
// the test makes those children run main.
func TestMain(m *testing.M) {
	if os.Getenv("WEIR_CLUSTER_EXAMPLE_WORKER") == "1" || isChild(os.Args[1:]) {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// isChild: the arguments are those of a process the example starts (a
// worker, or with -ha a coordinator or worker).
func isChild(args []string) bool {
	return len(args) > 0 && (args[0] == "-worker" || args[0] == "-role")
}

// Three OS processes; one worker is killed with SIGKILL after a
// checkpoint and a new one joins: the job recovers and the committed
// counts are exact (check fails the run otherwise).
func TestClusterSurvivesKilledWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv("WEIR_CLUSTER_EXAMPLE_WORKER", "1")
	// A guard against a hang, far above the seconds the run takes.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := runCoordinator(ctx, params{lines: 60000, par: 2}, true, 3); err != nil {
		t.Fatal(err)
	}
}

// -storage s3: the same three processes keep their checkpoints on an S3
// server in the test process (over HTTP, the workers through the AWS_*
// environment), and the counts are exact. runCoordinator fails unless a
// checkpoint's metadata reached the bucket. (Restores from it in
// processes: TestHAKilledCoordinatorsExactlyOnce.)
func TestClusterOnObjectStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv("WEIR_CLUSTER_EXAMPLE_WORKER", "1")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := runCoordinator(ctx, params{lines: 10000, par: 2, objects: true}, false, 3); err != nil {
		t.Fatal(err)
	}
}
