package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The README's quick start, run as it is shown there.
func Example() {
	main()
	// Output:
	// 100000 updates, 0 restarts; totals per key:
	// 0 499950000
	// 1 499960000
	// 2 499970000
	// 3 499980000
	// 4 499990000
	// 5 500000000
	// 6 500010000
	// 7 500020000
	// 8 500030000
	// 9 500040000
}
