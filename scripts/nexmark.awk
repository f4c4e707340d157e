# nexmark.awk passes the figure lines of examples/nexmark through and, at
# the end, prints one table: per query, events/s per core on each backend
# and parallelism that ran, Flink's published figure (nexmark/nexmark's
# README: Flink 1.13, 8 × 1 slot, RocksDB, exactly-once checkpoints every
# 3 min), and the ratio of weir's per-core figure to it, on the heap and
# the pebble backend at p = 1. A run that did not verify is marked "!".

BEGIN {
	split("q0 155 q1 158 q2 175 q3 152 q4 34.3 q5 22.1 q7 12.3 q8 146 q9 14.2 q11 39.7", f, " ")
	for (i = 1; i in f; i += 2)
		flink[f[i]] = f[i+1] * 1000
}

function field(name,    i, kv) {
	for (i = 1; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == name)
			return kv[2]
	}
	return ""
}

{ print }

/^nexmark q[0-9]+ / {
	q = $2; cfg = field("backend") " p=" field("p")
	if (!(q in seen)) { seen[q] = 1; queries[nq++] = q }
	if (!(cfg in cseen)) { cseen[cfg] = 1; cfgs[nc++] = cfg }
	v = field("events/s/core") + 0
	fig[q, cfg] = sprintf("%.0f K%s", v / 1000, field("verified") == "true" ? "" : "!")
	core[q, cfg] = v
}

END {
	if (nq == 0)
		exit
	printf "\nevents/s per core (events / CPU seconds of the process), %s events\n\n", field("events")
	printf "| query |"
	for (c = 0; c < nc; c++) printf " %s |", cfgs[c]
	printf " Flink | heap p=1 / Flink | pebble p=1 / Flink |\n|---|"
	for (c = 0; c < nc + 3; c++) printf "---|"
	printf "\n"
	for (i = 0; i < nq; i++) {
		q = queries[i]
		printf "| %s |", q
		for (c = 0; c < nc; c++) printf " %s |", ((q, cfgs[c]) in fig) ? fig[q, cfgs[c]] : "-"
		printf " %.1f K |", flink[q] / 1000
		for (b = 0; b < 2; b++) {
			cfg = (b == 0 ? "heap" : "pebble") " p=1"
			if (((q, cfg) in core) && flink[q] > 0)
				printf " %.1f× |", core[q, cfg] / flink[q]
			else
				printf " - |"
		}
		printf "\n"
	}
}
