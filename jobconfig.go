package weir

import (
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// options returns the job's settings in effect, by name, for the REST
// API's GET /jobs/{jobid}/config: every option with its value or
// default, never a secret (a token shows as "set").
func (c *config) options() map[string]string {
	o := map[string]string{}
	d := func(k string, v time.Duration) { o[k] = v.String() }
	i := func(k string, v int) { o[k] = strconv.Itoa(v) }
	b := func(k string, v bool) { o[k] = strconv.FormatBool(v) }
	set := func(k, v string) {
		if v != "" {
			o[k] = v
		}
	}
	i("parallelism", c.parallelism)
	i("maxParallelism", c.maxParallelism)
	d("bufferTimeout", c.bufferTimeout)
	i("segmentSize", c.segmentSize)
	i("numSegments", c.numSegments)
	i("exclusiveBuffersPerChannel", c.exclusive)
	i("floatingBuffersPerGate", c.floating)
	i("maxRecordSize", c.maxRecordSize)
	b("chaining", c.chaining)
	b("tcp", c.tcp)
	d("watermarkInterval", c.watermarkInterval)
	o["stateBackend"] = optionType(c.backend())
	set("restoreFrom", c.restoreFrom)
	b("allowNonRestoredState", c.allowNonRestored)
	set("jobID", c.jobID)
	if r := c.restart; r != nil {
		o["restartStrategy"] = fmt.Sprintf("%+v", r)
	} else if c.ckpt != nil {
		o["restartStrategy"] = "default"
	}
	if ck := c.ckpt; ck != nil {
		cc := ck.coordinatorConfig()
		o["checkpointing"] = "true"
		d("checkpointing.interval", cc.Interval)
		o["checkpointing.mode"] = cc.Mode.String()
		d("checkpointing.minPause", cc.MinPause)
		d("checkpointing.timeout", cc.Timeout)
		i("checkpointing.maxConcurrent", cc.MaxConcurrent)
		i("checkpointing.tolerableFailures", cc.TolerableFailures)
		i("checkpointing.retained", cc.Retained)
		b("checkpointing.retainOnCancel", cc.RetainOnCancel)
		b("checkpointing.unaligned", ck.Unaligned)
		d("checkpointing.alignedTimeout", ck.AlignedTimeout)
		b("checkpointing.forceUnaligned", ck.ForceUnaligned)
		set("checkpointing.dir", ck.Dir)
		if ck.Storage != nil {
			o["checkpointing.storage"] = optionType(ck.Storage)
		}
		set("checkpointing.savepointDir", ck.SavepointDir)
	} else {
		o["checkpointing"] = "false"
	}
	if db := c.debloat; db != nil {
		o["debloat"] = fmt.Sprintf("%+v", *db)
	}
	if cl := c.cluster; cl != nil {
		set("cluster.listen", cl.Listen)
		i("cluster.workers", cl.Workers)
		d("cluster.workerTimeout", cl.WorkerTimeout)
		b("cluster.tls", cl.TLS != nil)
		b("cluster.ha", cl.HA != nil)
	}
	m := &c.metrics
	o["metrics.jobName"] = m.name
	d("metrics.interval", m.interval)
	d("metrics.progressInterval", m.progress)
	for name, h := range map[string]*httpConfig{"dashboard": m.dashboard, "prometheus": m.prometheus} {
		if h == nil {
			continue
		}
		o[name+".addr"] = h.addr
		b(name+".token", h.token != "")
		b(name+".goMetrics", !h.noGoMetrics)
	}
	if h := m.dashboard; h != nil {
		b("dashboard.profiling", !h.noPprof)
		d("dashboard.lingerAfterStop", h.linger)
	}
	b("testHarness", c.harness != nil)
	return o
}

// optionType names v's type without its package path.
func optionType(v any) string {
	if v == nil {
		return ""
	}
	return reflect.TypeOf(v).String()
}
