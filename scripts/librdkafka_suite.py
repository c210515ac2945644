#!/usr/bin/env python3
"""The bookkeeping half of scripts/librdkafka-suite: which of librdkafka's tests to run
against `sluice serve`, and what came of them.

`plan` reads the test table in librdkafka's tests/test.c (the `_TEST(...)` entries of
`struct test tests[]`), applies the suite's own selection (TEST_F_LOCAL, TEST_F_KNOWN_ISSUE,
TEST_F_MANUAL, the entry's scenario, its TEST_BRKVER minimum against TEST_KAFKA_VERSION)
and then scripts/librdkafka-excluded.txt, the tests the suite would run against a one-node
plaintext broker but that cannot apply to sluice (several brokers, Kafka's own scripts,
SSL or SASL, mock cluster only). The test runner selects tests by number (`TESTS=0045`
runs every 0045_* entry the flags allow), so the plan is a list of numbers per scenario,
each with the entries the runner will start.

`collect` reads what the bash script left for each number (the runner's output, its
TEST_REPORT JSON, its exit status and whether the wall-clock limit stopped it), writes the
results file (JSON) and prints the summary.

Standard library only: CI has python3 for the Kafka client tests already.
"""

import argparse
import json
import os
import re
import sys

# Flags from tests/test.h; the _WIN32/_OSX variants are 0 on Linux.
FLAG_BITS = {
    "0": 0,
    "TEST_F_LOCAL": 0x1,
    "TEST_F_KNOWN_ISSUE": 0x2,
    "TEST_F_MANUAL": 0x4,
    "TEST_F_SOCKEM": 0x8,
    "TEST_F_KNOWN_ISSUE_WIN32": 0,
    "TEST_F_KNOWN_ISSUE_OSX": 0,
}
F_LOCAL, F_KNOWN_ISSUE, F_MANUAL, F_SOCKEM = 0x1, 0x2, 0x4, 0x8

# Why a test is not run, by category: the first five come from the suite's own flags,
# the rest from scripts/librdkafka-excluded.txt.
CATEGORY_TEXT = {
    "local": "never reaches a broker (TEST_F_LOCAL)",
    "known-issue": "marked a known issue of librdkafka (TEST_F_KNOWN_ISSUE)",
    "manual": "manual test (TEST_F_MANUAL)",
    "scenario": "needs another broker scenario than sluice serve was started with",
    "broker-version": "needs a newer broker than TEST_KAFKA_VERSION (TEST_BRKVER)",
    "several-brokers": "needs a cluster of several brokers",
    "kafka-scripts": "needs Apache Kafka's own scripts, JMX, Java client or authorizer (KAFKA_PATH)",
    "ssl": "needs an SSL listener",
    "sasl": "needs SASL authentication",
    "mock-only": "runs only against librdkafka's mock cluster",
    "legacy-format": "needs message format v0/v1 (Produce v0-2), which sluice, like Kafka 4.0, does not speak",
}
SUITE_CATEGORIES = ("local", "known-issue", "manual", "scenario", "broker-version")


def brkver(text):
    """'3.7.0' or '3.7.0.0' -> the runner's TEST_BRKVER integer."""
    parts = [int(p) for p in text.split(".")] + [0, 0, 0, 0]
    a, b, c, d = parts[:4]
    return (a << 24) | (b << 16) | (c << 8) | d


def split_top_level(text):
    """Splits a macro's argument list at the commas outside parentheses and strings."""
    parts, depth, cur, in_str = [], 0, [], False
    for ch in text:
        if ch == '"':
            in_str = not in_str
        elif not in_str:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append("".join(cur).strip())
                cur = []
                continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def parse_table(test_c):
    """The `_TEST(...)` entries of test.c's `struct test tests[]`, in table order, each
    with its flags, minimum broker version, scenario and the #if guard around it."""
    src = open(test_c, encoding="utf-8").read()
    start = src.index("struct test tests[] = {")
    end = src.index("{NULL}};", start)
    body = re.sub(r"/\*.*?\*/", "", src[start:end], flags=re.S)
    entries, guard, pos = [], None, 0
    token = re.compile(r"#if\s+(\w+)|#endif|_TEST\(")
    while True:
        m = token.search(body, pos)
        if not m:
            break
        if m.group(0).startswith("#if"):
            guard, pos = m.group(1), m.end()
            continue
        if m.group(0) == "#endif":
            guard, pos = None, m.end()
            continue
        depth, q = 0, m.end() - 1
        for q in range(m.end() - 1, len(body)):
            if body[q] == "(":
                depth += 1
            elif body[q] == ")":
                depth -= 1
                if depth == 0:
                    break
        args = split_top_level(body[m.end() : q])
        pos = q + 1
        name, flags_expr = args[0], args[1]
        flags = 0
        for flag in flags_expr.split("|"):
            flag = flag.strip()
            if flag not in FLAG_BITS:
                sys.exit(f"librdkafka_suite.py: unknown test flag {flag!r} in {name}")
            flags |= FLAG_BITS[flag]
        minver, scenario = 0, "default"
        for arg in args[2:]:
            v = re.fullmatch(r"TEST_BRKVER\((\d+),\s*(\d+),\s*(\d+),\s*(\d+)\)", arg)
            if v:
                minver = brkver(".".join(v.groups()))
            elif arg == "TEST_BRKVER_TOPIC_ADMINAPI":
                minver = brkver("0.10.2.0")
            s = re.fullmatch(r'\.scenario\s*=\s*"([^"]*)"', arg)
            if s:
                scenario = s.group(1)
        entries.append(
            {"id": name, "number": name.split("_")[0], "flags": flags, "minver": minver,
             "scenario": scenario, "guard": guard}
        )
    if not entries:
        sys.exit(f"librdkafka_suite.py: no _TEST entries found in {test_c}")
    return entries


def read_excluded(path):
    """scripts/librdkafka-excluded.txt: `TEST_ID CATEGORY reason...` per line."""
    excluded = {}
    allowed = [c for c in CATEGORY_TEXT if c not in SUITE_CATEGORIES]
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[1] not in allowed:
            sys.exit(f"{path}:{n}: expected `TEST_ID CATEGORY reason`, with CATEGORY one of " + ", ".join(allowed))
        if parts[0] in excluded:
            sys.exit(f"{path}:{n}: {parts[0]} is listed twice")
        excluded[parts[0]] = (parts[1], parts[2])
    return excluded


def plan(args):
    entries = parse_table(args.test_c)
    excluded = read_excluded(args.excluded)
    known = {e["id"] for e in entries}
    stale = sorted(set(excluded) - known)
    if stale:
        sys.exit(f"{args.excluded}: not in {args.test_c}'s test table: {', '.join(stale)}")
    version = brkver(args.kafka_version)
    scenarios = args.scenarios.split(",")
    only = set(args.only.replace(",", " ").split()) if args.only else None

    runs, skipped = {}, []
    for e in entries:
        why = None
        if e["flags"] & F_MANUAL:
            why = ("manual", CATEGORY_TEXT["manual"])
        elif e["flags"] & F_LOCAL:
            why = ("local", CATEGORY_TEXT["local"])
        elif e["flags"] & F_KNOWN_ISSUE:
            why = ("known-issue", CATEGORY_TEXT["known-issue"])
        elif e["minver"] > version:
            why = ("broker-version", f"needs broker {fmt_ver(e['minver'])}, TEST_KAFKA_VERSION is {args.kafka_version}")
        elif e["id"] in excluded:
            why = excluded[e["id"]]
        else:
            # An entry may name several scenarios ("default,ak23"); it runs in the first
            # one sluice serve is started with.
            mine = [s for s in scenarios if s in e["scenario"].split(",")]
            if not mine:
                why = ("scenario", f"needs the {e['scenario']} scenario (tests/scenarios/), not run here")
        if why:
            skipped.append({"id": e["id"], "category": why[0], "reason": why[1]})
            continue
        if only is not None and e["number"] not in only and e["id"] not in only:
            continue
        runs.setdefault((mine[0], e["number"]), []).append(e["id"])

    if only is not None:
        unknown = sorted(t for t in only if t not in known and t not in {e["number"] for e in entries})
        if unknown:
            sys.exit(f"librdkafka-suite: no such test: {', '.join(unknown)}")
        for s in skipped:
            named = s["id"] in only or (s["id"].split("_")[0] in only and s["category"] not in SUITE_CATEGORIES)
            if named:
                print(f"librdkafka-suite: not run: {s['id']} ({s['category']}: {s['reason']})", file=sys.stderr)
    # The runner starts every entry of a number its flags allow: an excluded entry that
    # shares its number with a run one would run too, and its result would count.
    for (scenario, number), ids in runs.items():
        for s in skipped:
            if s["id"].split("_")[0] == number and s["category"] not in SUITE_CATEGORIES:
                e = next(x for x in entries if x["id"] == s["id"])
                if scenario in e["scenario"].split(","):
                    sys.exit(f"librdkafka-suite: {s['id']} is excluded but the runner would start it "
                             f"with {', '.join(ids)} (TESTS={number}); the runner selects by number")
    # One scenario after the other (each starts sluice serve afresh), in table order.
    ordered = sorted(runs.items(), key=lambda r: scenarios.index(r[0][0]))
    out = {
        "kafka_version": args.kafka_version,
        "scenarios": scenarios,
        "runs": [{"scenario": s, "number": n, "ids": ids} for (s, n), ids in ordered],
        "excluded": skipped,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    for run in out["runs"]:
        print(f"{run['scenario']}\t{run['number']}\t{','.join(run['ids'])}")


def fmt_ver(v):
    return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sections(log_text):
    """The runner's output split per test: with -p1 each test's lines follow its
    `Running test NAME` banner until the next banner (or the summary)."""
    out, cur = {}, None
    for line in log_text.splitlines():
        m = re.search(r"================= Running test (\S+) =================", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, [])
        if re.search(r"^TEST \d+ \(.*\) SUMMARY", line):
            cur = None
        if cur:
            out[cur].append(line)
    return out


def first_failure(lines, test_id):
    """The runner's first `### Test "ID..." failed at ...` message for a test."""
    for i, line in enumerate(lines):
        if f'### Test "{test_id}' in line and "failed at" in line:
            msg = lines[i + 1] if i + 1 < len(lines) else ""
            return (line.strip("# ").strip() + ": " + msg.strip())[:600]
    return None


def collect(args):
    plan_ = json.load(open(args.plan, encoding="utf-8"))
    results = []
    for run in plan_["runs"]:
        key = f"{run['scenario']}-{run['number']}"
        log_path = os.path.join(args.dir, "logs", key + ".log")
        meta_path = os.path.join(args.dir, "logs", key + ".meta")
        report_path = os.path.join(args.dir, "logs", key + ".report.json")
        log = ANSI.sub("", open(log_path, encoding="utf-8", errors="replace").read()) if os.path.exists(log_path) else ""
        meta = {}
        if os.path.exists(meta_path):
            for line in open(meta_path, encoding="utf-8"):
                k, _, v = line.strip().partition("=")
                meta[k] = v
        report = {}
        if os.path.exists(report_path):
            try:
                report = json.load(open(report_path, encoding="utf-8")).get("tests", {})
            except ValueError:
                report = {}  # cut short when the process was killed
        per_test = sections(log)
        for test_id in run["ids"]:
            lines = per_test.get(test_id, [])
            rep = report.get(test_id, {})
            state = rep.get("state")
            seconds = rep.get("duration")
            timed_out_inside = any(f"Test {test_id}" in l and "timed out" in l for l in lines)
            if meta.get("timed_out") == "1" and state in (None, "RUNNING", "DNS"):
                status = "timeout"
            elif timed_out_inside:
                status = "timeout"
            elif state == "PASSED":
                status = "passed"
            elif state == "SKIPPED":
                status = "skipped"
            elif state == "FAILED" or state == "RUNNING":
                status = "failed"
            elif lines:
                status = "failed"  # started, then the process died (crash, abort)
            else:
                status = "not-run" if meta.get("timed_out") != "1" else "timeout"
            if seconds is None or (status == "timeout" and not seconds):
                seconds = float(meta.get("seconds", 0)) if len(run["ids"]) == 1 else None
            entry = {"id": test_id, "scenario": run["scenario"], "status": status,
                     "seconds": round(seconds, 1) if seconds is not None else None}
            if status == "skipped":
                reason = next((l.split("SKIPPING TEST:", 1)[1] for l in lines if "SKIPPING TEST:" in l), "")
                # The runner prints the reason without a newline when it has none of its own.
                entry["reason"] = re.split(r"\[\S+\s+/\s*[0-9.]+s\]", reason)[0].strip()
            if status not in ("passed", "skipped"):
                entry["failure"] = first_failure(lines, test_id) or (
                    f"runner exited with status {meta.get('rc', '?')}" if status != "timeout"
                    else f"stopped after {meta.get('seconds', '?')} s (wall-clock limit)")
                tail = lines if lines else log.splitlines()
                entry["output_tail"] = tail[-args.tail:]
                if meta.get("server") == "exited":
                    entry["failure"] = "sluice serve exited during this test; " + entry["failure"]
            results.append(entry)

    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    excluded_counts = {}
    for x in plan_["excluded"]:
        excluded_counts[x["category"]] = excluded_counts.get(x["category"], 0) + 1
    doc = {
        "kafka_version": plan_["kafka_version"],
        "scenarios": plan_["scenarios"],
        "sluice": args.sluice,
        "serve_args": args.serve_args,
        "counts": counts,
        "excluded_counts": excluded_counts,
        "tests": results,
        "excluded": plan_["excluded"],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)

    width = max((len(r["id"]) for r in results), default=10)
    print()
    print(f"librdkafka suite against sluice serve (TEST_KAFKA_VERSION={plan_['kafka_version']})")
    for r in results:
        secs = f"{r['seconds']:7.1f}s" if r["seconds"] is not None else "      ?s"
        extra = ""
        if r["status"] not in ("passed",):
            extra = "  " + (r.get("failure") or r.get("reason") or "")[:160]
        print(f"  {r['id']:<{width}}  {r['status']:<8} {secs}{extra}")
    if plan_["excluded"] and not args.quiet_excluded:
        print("excluded:")
        for cat in CATEGORY_TEXT:
            if cat in excluded_counts:
                print(f"  {excluded_counts[cat]:3}  {cat}: {CATEGORY_TEXT[cat]}")
    print(f"results: {args.out}")
    passed = counts.get("passed", 0)
    failed = sum(v for k, v in counts.items() if k not in ("passed", "skipped"))
    print(f"timed out: {counts.get('timeout', 0)}, not run: {counts.get('not-run', 0)} (both counted as failed below)")
    # The plain closing line CI reads.
    print(f"librdkafka: {passed} passed, {failed} failed, {counts.get('skipped', 0)} skipped")
    return 0 if failed == 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("--test-c", required=True)
    a.add_argument("--excluded", required=True)
    a.add_argument("--kafka-version", required=True)
    a.add_argument("--scenarios", default="default")
    a.add_argument("--only", default="")
    a.add_argument("--out", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--plan", required=True)
    c.add_argument("--dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--sluice", default="")
    c.add_argument("--serve-args", default="")
    c.add_argument("--tail", type=int, default=40)
    c.add_argument("--quiet-excluded", action="store_true")
    args = p.parse_args()
    if args.cmd == "plan":
        plan(args)
        return 0
    return collect(args)


if __name__ == "__main__":
    sys.exit(main())
