# ratio.awk passes `go test -bench` output through and, at the end, prints
# the ratio of BenchmarkExchangeInProcess's median records/s to
# BenchmarkIdealPipeline's: how close the real in-process exchange comes to
# the ideal pipeline measured in the same run (make baseline, make bench).

function median(a, n,    i, j, t) {
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && a[j-1] > a[j]; j--) {
			t = a[j]; a[j] = a[j-1]; a[j-1] = t
		}
	return n % 2 ? a[int(n/2)] : (a[n/2-1] + a[n/2]) / 2
}

function rate(    i) {
	for (i = 2; i < NF; i++)
		if ($(i+1) == "records/s")
			return $i + 0
	return -1
}

{ print }
/^BenchmarkIdealPipeline(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) ideal[ni++] = r }
/^BenchmarkExchangeInProcess(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) exch[ne++] = r }

END {
	if (ni == 0 || ne == 0)
		exit
	i = median(ideal, ni); e = median(exch, ne)
	printf "\nexchange / ideal pipeline: %.2f (median %.1f / %.1f M records/s over %d / %d runs)\n", e / i, e / 1e6, i / 1e6, ne, ni
}
