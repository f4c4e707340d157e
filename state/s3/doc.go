// Package s3 is checkpoint storage on the S3 API (AWS S3, MinIO, Ceph
// RGW, any S3-compatible object store): a state.Storage whose checkpoints,
// savepoints, channel state and incremental shared files are objects.
//
// A Storage keeps one job's checkpoints under its own key prefix, the
// job's place, <Prefix>/<JobID>/:
//
//	<place>chk-<id>/<name>                   one object per task state file
//	<place>chk-<id>/_metadata                written last: a checkpoint is complete, and visible, only once it exists
//	<place>shared/<backend>/<id>-<name>      a file of incremental snapshots, uploaded for checkpoint id
//
// Every state object starts with weir's binding header (job, checkpoint,
// task, operator) and its handle records its size and XXH64, so an object
// of another job or checkpoint, or a truncated one, never restores.
// Objects stream up: a file smaller than Config.PartSize goes in one PUT,
// a larger one as a multipart upload of PartSize parts (aborted if the
// file is), so memory is PartSize per file being written, whatever the
// state's size. Reads are ranged GETs of Config.ReadAhead bytes.
//
// Retention and Discard never list the bucket: a discard lists the
// discarded checkpoint's prefix, the job's shared prefix of files uploaded
// for it, and the job's checkpoint prefixes (delimited: one entry per
// checkpoint), and reads the metadata of the checkpoints still there
// (cached: metadata objects are written once). A shared file goes when no
// remaining checkpoint refers to it.
//
// S3 has no lock. Metadata objects are written with If-None-Match: *, so
// a completed checkpoint is never overwritten (a second job writing the
// same place fails its checkpoints instead), but nothing keeps a second
// job from running on the same place: with object storage the one
// running job per place is kept by high availability (ClusterConfig.HA:
// only etcd's leader writes), or by giving each job its own job ID, which
// weir does by default.
//
// # Usage
//
//  1. Build a Config: by hand, or with FromURL("s3://bucket/prefix", jobID),
//     which takes the endpoint, region and credentials from the standard
//     environment (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION or
//     AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
//     AWS_SESSION_TOKEN, then the shared credentials file of AWS_PROFILE).
//  2. New(ctx, cfg) checks the configuration and that the bucket exists and
//     the credentials are accepted, and returns the Storage.
//  3. Hand it to a job (weir.CheckpointConfig.Storage), or let the job open
//     it (weir.CheckpointConfig.Dir "s3://bucket/prefix").
package s3
