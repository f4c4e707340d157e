package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
)

// codecName is the gRPC content-subtype of the control plane's messages
// (content-type application/grpc+weir-json).
const codecName = "weir-json"

// jsonCodec encodes the plain Go message structs of this package as JSON.
// It is forced on both ends (grpc.ForceServerCodec, grpc.ForceCodec)
// rather than registered globally, so importing the package changes no
// process-wide gRPC state. Decoding is strict: unknown fields are an error.
//
// JSON keeps every value exactly: int64s decode exactly (encoding/json
// parses into the target integer type, not through float64), byte slices
// travel as base64, and nil slices and maps stay distinct from empty ones.
type jsonCodec struct{}

func (jsonCodec) Name() string { return codecName }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode %T: %w", v, err)
	}
	return b, nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: undecodable %T: %v", ErrMalformed, v, err)
	}
	if d.More() {
		return fmt.Errorf("%w: undecodable %T: trailing data", ErrMalformed, v)
	}
	return nil
}

const (
	serviceName   = "weir.cluster.JobManager"
	connectMethod = "/" + serviceName + "/Connect"
	// tokenKey is the stream metadata key carrying WorkerConfig.Token.
	tokenKey = "weir-token"
)

// connectHandler is what the service's implementation provides: one call
// per worker stream, returning when the stream should end.
type connectHandler interface {
	connect(grpc.ServerStream) error
}

var connectStream = grpc.StreamDesc{
	StreamName:    "Connect",
	ServerStreams: true,
	ClientStreams: true,
}

// serviceDesc is the hand-written equivalent of what protoc-gen-go-grpc
// would generate for
//
//	service JobManager {
//	  rpc Connect(stream WorkerMessage) returns (stream CoordinatorMessage);
//	}
func serviceDesc() *grpc.ServiceDesc {
	sd := connectStream
	sd.Handler = func(srv any, ss grpc.ServerStream) error {
		return srv.(connectHandler).connect(ss)
	}
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*connectHandler)(nil),
		Streams:     []grpc.StreamDesc{sd},
		Metadata:    "weir/cluster (hand-written, no .proto)",
	}
}
