package network

import (
	"testing"

	"github.com/google/uuid"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newID() uuid.UUID { return uuid.New() }
