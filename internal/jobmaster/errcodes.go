package jobmaster

import (
	"github.com/weirstream/weir/eventtime/join"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/errcode"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// The runtime's errors that a task's failure can match, registered so that
// the job's error in cluster mode matches them as it does in one process
// (the root package registers its own). A code is part of the control
// plane's protocol: never rename one.
func init() {
	for _, r := range []struct {
		code string
		err  error
	}{
		{"state.incompatible", state.ErrIncompatibleState},
		{"state.corrupt-value", state.ErrCorruptState},
		{"state.corrupt-snapshot", state.ErrCorruptSnapshot},
		{"state.corrupt-channel-state", state.ErrCorruptChannelState},
		{"state.not-found", state.ErrNotFound},
		{"state.locked", state.ErrLocked},
		{"deploy.rescale", deploy.ErrRescale},
		{"deploy.finished-mixed", deploy.ErrFinishedMixed},
		{"deploy.non-restored-state", deploy.ErrNonRestoredState},
		{"deploy.operator-kind-changed", deploy.ErrOperatorKindChanged},
		{"task.rescale-channel-state", task.ErrRescaleChannelState},
		{"window.no-timestamp", window.ErrNoTimestamp},
		{"window.out-of-range", window.ErrOutOfRange},
		{"join.broadcast-read-only", join.ErrBroadcastReadOnly},
		{"join.no-current-key", join.ErrNoCurrentKey},
		{"network.connection-lost", network.ErrConnectionLost},
	} {
		errcode.MustRegister(r.code, r.err)
	}
}
