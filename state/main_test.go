package state_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type int64Codec struct{}

func (int64Codec) Append(dst []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(v))
}
func (int64Codec) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, errors.New("int64: need 8 bytes")
	}
	return int64(binary.LittleEndian.Uint64(src)), nil
}
