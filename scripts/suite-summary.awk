# The closing line of scripts/test.sh: `canaryd: N passed, N failed, N skipped`, in the plain
# form CI reads (one word and a colon, then the counts), after the reason of every skip.
#
#   awk -v skips=SKIP_LOG -v status=EXIT_STATUS -f scripts/suite-summary.awk CARGO_TEST_OUTPUT...
#
# Counts come from cargo's `test result:` lines (one per test binary and doc-test run). Each
# line of the skip log (canary_testkit::skip writes them: tier, call site, test, reason, tab-
# separated) is a test that cargo counted as passed but that did not run: it moves from passed
# to skipped, once per test however often it called skip. A line with a fifth field `not-run`
# (test.sh writes them for the llama.cpp tier's tests when that tier does not run) is a test
# cargo never counted as passed (it was ignored in the workspace run): counted as skipped, and
# not taken out of the passes.
BEGIN {
    while ((getline line < skips) > 0) {
        split(line, f, "\t")
        key = f[2] "\t" f[3]
        if (key in seen) continue
        seen[key] = 1
        n++
        if (f[5] == "not-run") notrun++
        listed = listed sprintf("  skipped [%s] %s (%s): %s\n", f[1], f[3], f[2], f[4])
    }
}
/^test result:/ {
    for (i = 1; i <= NF; i++) {
        if ($(i + 1) ~ /^passed/) passed += $i
        if ($(i + 1) ~ /^failed/) failed += $i
    }
}
END {
    printf "\n%s", listed
    if (status != 0 && failed == 0) note = " (a test binary failed without a result line: see above)"
    printf "canaryd: %d passed, %d failed, %d skipped%s\n", passed - (n - notrun), failed, n, note
}
