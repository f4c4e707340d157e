package s3

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/state"
)

// Scheme is the URL scheme of S3 checkpoint locations: s3://bucket/prefix.
const Scheme = "s3://"

// MinPartSize is the smallest part S3 accepts in a multipart upload (but
// the last).
const MinPartSize = 5 << 20

// Config configures a Storage. Zero values mean the documented defaults.
type Config struct {
	// Bucket holds the checkpoints (required; it must exist).
	Bucket string
	// Prefix is the key prefix of the checkpoint root ("": the bucket's
	// root); the job's place is Prefix/JobID/.
	Prefix string
	// JobID is the job whose checkpoints the storage holds (a valid
	// state job ID): its place is Prefix/JobID/, so two jobs on one bucket
	// and prefix never see each other's checkpoints. Empty: the place is
	// Prefix itself (to read a savepoint, or a place named by its URL),
	// and no job ID is recorded.
	JobID string
	// Endpoint is the S3 endpoint: a URL ("http://127.0.0.1:9000") or a
	// host[:port], which is reached over HTTPS. "" is AWS S3. A custom
	// endpoint is addressed path-style (endpoint/bucket/key), AWS
	// virtual-host style.
	Endpoint string
	// Region of the bucket ("": the endpoint's, or us-east-1).
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken are the credentials;
	// empty: the standard chain (the AWS_* environment variables, then
	// the shared credentials file).
	AccessKeyID, SecretAccessKey, SessionToken string
	// PartSize is the size of a multipart upload's parts, and of the
	// largest file sent in one PUT (default 16 MiB; at least MinPartSize).
	// Each file being written buffers up to one part.
	PartSize int64
	// ReadAhead is how much one ranged GET reads (default 1 MiB); each
	// open state file holds one such window.
	ReadAhead int
	// RequestTimeout bounds each request, its retries included (default
	// 2 minutes).
	RequestTimeout time.Duration
	// MaxRetries is how often a failed request is retried (default 3;
	// negative: never).
	MaxRetries int
	// Transport carries the requests (nil: the HTTP client's default).
	Transport http.RoundTripper
	// Logger receives errors about skipped checkpoints (nil: none).
	Logger *zap.Logger
}

const (
	defaultPartSize       = 16 << 20
	defaultReadAhead      = 1 << 20
	defaultRequestTimeout = 2 * time.Minute
	defaultMaxRetries     = 3
	maxPartSize           = 5 << 30
)

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, errors.New("s3: Config.Bucket is required"))
	} else if err := validBucket(c.Bucket); err != nil {
		errs = append(errs, err)
	}
	if c.JobID != "" {
		if err := state.ValidJobID(c.JobID); err != nil {
			errs = append(errs, fmt.Errorf("s3: %w", err))
		}
	}
	if strings.HasPrefix(c.Prefix, "/") || strings.Contains(c.Prefix, "//") {
		errs = append(errs, fmt.Errorf("s3: invalid prefix %q", c.Prefix))
	}
	if c.PartSize != 0 && (c.PartSize < MinPartSize || c.PartSize > maxPartSize) {
		errs = append(errs, fmt.Errorf("s3: PartSize %d is outside [%d, %d]", c.PartSize, MinPartSize, maxPartSize))
	}
	if c.ReadAhead < 0 {
		errs = append(errs, fmt.Errorf("s3: negative ReadAhead %d", c.ReadAhead))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("s3: negative RequestTimeout %v", c.RequestTimeout))
	}
	if c.Endpoint != "" {
		if _, _, err := parseEndpoint(c.Endpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		errs = append(errs, errors.New("s3: AccessKeyID and SecretAccessKey go together"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.PartSize == 0 {
		c.PartSize = defaultPartSize
	}
	if c.ReadAhead == 0 {
		c.ReadAhead = defaultReadAhead
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = defaultMaxRetries
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.Prefix = strings.Trim(c.Prefix, "/")
	return c
}

// validBucket checks S3's bucket naming rules (3 to 63 lowercase letters,
// digits, '-' and '.', starting and ending with a letter or digit).
func validBucket(b string) error {
	bad := func(why string) error { return fmt.Errorf("s3: invalid bucket name %q: %s", b, why) }
	if len(b) < 3 || len(b) > 63 {
		return bad("must be 3 to 63 characters")
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return bad("only lowercase letters, digits, '-' and '.' are allowed")
		}
	}
	if first, last := b[0], b[len(b)-1]; first == '-' || first == '.' || last == '-' || last == '.' {
		return bad("must start and end with a letter or digit")
	}
	return nil
}

// IsURL reports whether loc is an S3 location (s3://...).
func IsURL(loc string) bool { return strings.HasPrefix(loc, Scheme) }

// ParseURL splits "s3://bucket/prefix" into its bucket and key prefix
// (without slashes at either end).
func ParseURL(loc string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(loc, Scheme)
	if !ok {
		return "", "", fmt.Errorf("s3: invalid URL %q: it must start with %s", loc, Scheme)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("s3: invalid URL %q: no bucket (s3://bucket/prefix)", loc)
	}
	if err := validBucket(bucket); err != nil {
		return "", "", fmt.Errorf("s3: invalid URL %q: %w", loc, err)
	}
	if strings.ContainsAny(prefix, "?#") {
		return "", "", fmt.Errorf("s3: invalid URL %q: query and fragment are not allowed", loc)
	}
	prefix = strings.Trim(prefix, "/")
	if strings.Contains(prefix, "//") {
		return "", "", fmt.Errorf("s3: invalid URL %q: empty path element", loc)
	}
	return bucket, prefix, nil
}

// FromURL returns the Config of the checkpoints of job jobID at loc,
// "s3://bucket/prefix", with the endpoint, region and credentials of the
// standard environment:
//
//	AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL   the endpoint ("": AWS S3)
//	AWS_REGION, else AWS_DEFAULT_REGION          the region
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
//	then the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE)
func FromURL(loc, jobID string) (Config, error) {
	bucket, prefix, err := ParseURL(loc)
	if err != nil {
		return Config{}, err
	}
	c := Config{Bucket: bucket, Prefix: prefix, JobID: jobID}
	c.Endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
	if c.Endpoint == "" {
		c.Endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	c.Region = os.Getenv("AWS_REGION")
	if c.Region == "" {
		c.Region = os.Getenv("AWS_DEFAULT_REGION")
	}
	return c, nil
}

// parseEndpoint returns the host[:port] of an endpoint and whether it is
// reached over TLS.
func parseEndpoint(e string) (host string, secure bool, err error) {
	if !strings.Contains(e, "://") {
		if strings.ContainsAny(e, "/?#") {
			return "", false, fmt.Errorf("s3: invalid endpoint %q", e)
		}
		return e, true, nil
	}
	u, err := url.Parse(e)
	if err != nil {
		return "", false, fmt.Errorf("s3: invalid endpoint %q: %w", e, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("s3: invalid endpoint %q: scheme must be http or https", e)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", false, fmt.Errorf("s3: invalid endpoint %q: want scheme://host[:port]", e)
	}
	return u.Host, u.Scheme == "https", nil
}
