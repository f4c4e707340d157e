package weir_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/weirstream/weir"
)

var ErrPoison = errors.New("poison record")

func init() {
	if err := weir.RegisterError("myjob.poison", ErrPoison); err != nil {
		panic(err)
	}
}

// A user function's error, registered, matches the job's error with
// errors.Is in one process and across processes alike
// (TestClusterErrorKeepsItsIdentity runs this across processes).
func ExampleRegisterError() {
	env := weir.NewEnvironment()
	src := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	checked := weir.MapErr(src, func(i int64) (int64, error) {
		if i == 3 {
			return 0, fmt.Errorf("record %d: %w", i, ErrPoison)
		}
		return i, nil
	})
	weir.Discard(checked)
	_, err := env.Execute(context.Background())
	fmt.Println(errors.Is(err, ErrPoison))
	// Output: true
}
