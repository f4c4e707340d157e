package cluster

import "errors"

var (
	// ErrClosed is returned by Server methods after Close, and by Serve
	// when called twice.
	ErrClosed = errors.New("cluster: server closed")
	// ErrNotConnected is returned by Server.Send when the worker has no
	// live stream (never registered, lost, or shut down).
	ErrNotConnected = errors.New("cluster: worker not connected")
	// ErrSessionClosed is returned by Session.Send after the session ended.
	ErrSessionClosed = errors.New("cluster: session closed")
	// ErrMalformed wraps every complaint about a message that sets no field
	// or several, comes out of order, or does not decode.
	ErrMalformed = errors.New("cluster: malformed message")
	// ErrHeartbeatTimeout is the cause of a loss detected because the peer
	// sent nothing for HeartbeatTimeout.
	ErrHeartbeatTimeout = errors.New("cluster: heartbeat timeout")
	// ErrDisconnected is the cause of a loss detected because the peer's
	// connection closed without a goodbye: its process stopped or was
	// killed, or the network between the two dropped the connection (gRPC
	// reports a canceled or unavailable stream).
	ErrDisconnected = errors.New("cluster: the connection closed without a goodbye (the peer stopped or was killed, or the network dropped it)")
	// ErrShutdown is the error Handler.WorkerLost receives for a worker the
	// coordinator sent Shutdown.
	ErrShutdown = errors.New("cluster: worker shut down")
	// ErrRejected wraps the coordinator's refusal of a registration (wrong
	// fingerprint or token, duplicate worker ID); RunWorker returns it
	// without retrying, except for a duplicate ID. The wrapped gRPC status
	// (status.FromError) carries the code and the coordinator's reason.
	ErrRejected = errors.New("cluster: registration rejected")
	// ErrCoordinatorLost is returned by RunWorker when an established
	// session ends without Shutdown: the stream broke or the coordinator
	// fell silent. It wraps the cause.
	ErrCoordinatorLost = errors.New("cluster: coordinator lost")
)
