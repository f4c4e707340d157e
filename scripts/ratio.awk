# ratio.awk passes `go test -bench` output through and, at the end, prints
# the ratio of BenchmarkExchangeInProcess's median records/s to
# BenchmarkIdealPipeline's, and of BenchmarkTCPExchange/16B's to
# BenchmarkTCPRecordPipeline's: how close the real exchanges come to their
# ideal pipelines measured in the same run (make baseline, make bench).

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

function ratio(what, real, ideal, nr, ni,    r, i) {
	if (nr == 0 || ni == 0)
		return
	r = median(real, nr); i = median(ideal, ni)
	printf "%s: %.2f (median %.1f / %.1f M records/s over %d / %d runs)\n", what, r / i, r / 1e6, i / 1e6, nr, ni
}

{ print }
/^BenchmarkIdealPipeline(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) ideal[ni++] = r }
/^BenchmarkExchangeInProcess(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) exch[ne++] = r }
/^BenchmarkTCPRecordPipeline(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) tideal[nti++] = r }
/^BenchmarkTCPExchange\/16B(-[0-9]+)?[ \t]/ { r = rate(); if (r > 0) tcp[nt++] = r }

END {
	if (ni + ne + nti + nt > 0)
		print ""
	ratio("exchange / ideal pipeline", exch, ideal, ne, ni)
	ratio("TCP exchange 16B / TCP record pipeline", tcp, tideal, nt, nti)
}
