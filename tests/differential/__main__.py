"""Catalog run: ``python -m tests.differential [--cases N] [--seed S]
[--families a,b] [--shrink K]`` runs N cases per family, prints per family
the cases run and mismatches by class, and a shrunk reproducer of the first
K mismatches of each class."""

from __future__ import annotations

import argparse
import secrets
from collections import Counter

from tests.differential import generate, runner
from tests.differential.reference import Reference


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.differential")
    parser.add_argument("--cases", type=int, default=200, help="cases per family")
    parser.add_argument("--seed", default=secrets.token_hex(4))
    parser.add_argument("--families", default=",".join(generate.FAMILIES))
    parser.add_argument("--shrink", type=int, default=1, help="reproducers per class")
    args = parser.parse_args()
    print(f"seed {args.seed}")
    totals = []
    with Reference() as reference:
        for family in args.families.split(","):
            cases = [generate.case(family, f"{args.seed}-{i}") for i in range(args.cases)]
            outcomes = runner.run(reference, cases)
            mismatches = [o for o in outcomes if not o.agrees]
            counts = Counter(o.signature for o in mismatches)
            refused = sum(1 for o in outcomes if o.kafka.error and o.strom.error)
            totals.append((family, len(cases), len(mismatches), refused, counts))
            for signature in counts:
                firsts = [o for o in mismatches if o.signature == signature][: args.shrink]
                for outcome in firsts:
                    print(runner.render(runner.shrink(reference, outcome)), end="\n\n", flush=True)
    print("family | cases | mismatches | both refused | classes")
    for family, n, bad, refused, counts in totals:
        classes = "; ".join(f"{c} x {s}" for s, c in counts.most_common())
        print(f"{family} | {n} | {bad} | {refused} | {classes}")


if __name__ == "__main__":
    main()
