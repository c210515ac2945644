"""What the client scripts here share: one line per step, exit non-zero on the first
failed check, and the checks of the group hand-over scripts."""

import sys


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def step(msg):
    print(msg, flush=True)


def consume_values(consumer, count, timeout=15):
    """The values of the next `count` records `consumer` polls, each within `timeout`
    seconds; fails the check on a timeout or an error."""
    got = []
    while len(got) < count:
        m = consumer.poll(timeout)
        check(m is not None, f"records within {timeout} s (have {len(got)})")
        check(m.error() is None, f"no error: {m.error()}")
        got.append(m.value())
    return got


def check_hand_over(reads, records, partitions, a1, a2, revocations):
    """Two members of one group read `records` records between them, each exactly once
    (`reads` maps (partition, offset) to how many times it was read), ended with disjoint
    assignments `a1` and `a2` covering every partition, and the first gave partitions up."""
    twice = sorted(k for k, n in reads.items() if n > 1)
    check(len(reads) == records, f"the two members read {len(reads)} distinct records of {records}")
    check(not twice, f"{len(twice)} records read twice, the first {twice[:5]} (revocations {revocations})")
    check(a1 and a2 and not (a1 & a2) and (a1 | a2) == set(range(partitions)), f"assignments {a1} and {a2}")
    check(any(name == "first" and parts for name, parts in revocations),
          f"the first member gave partitions up: {revocations}")
    step(f"a second member joined: assignments {sorted(a1)} and {sorted(a2)}, every record read once")
    print("OK", flush=True)
