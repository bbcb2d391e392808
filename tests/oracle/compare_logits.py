#!/usr/bin/env python3
"""compare_logits.py — layermesh's logits against llama.cpp's, for tests/oracle.

    compare_logits.py last OURS THEIRS TOL
        OURS and THEIRS hold one logit a line (layermesh run --logits, lm_oracle
        --logits-last). Prints the max |difference| and the two argmaxes; exit 1 when the
        difference exceeds TOL or the argmaxes differ.

    compare_logits.py greedy OURS THEIRS TOL N_PROMPT
        OURS and THEIRS hold one line of logits per position (--logits-all) of the same
        sequence: llama.cpp's greedy continuation of an N_PROMPT-token prompt fed back to
        both (teacher forcing). At every generated position llama.cpp's choice must be
        layermesh's argmax too wherever llama.cpp's top-2 margin exceeds 2 x TOL (a random
        model's logits are flat, so two near-equal candidates within the tolerance may
        swap); the positions inside that margin are counted and printed, never skipped
        silently. Exit 1 on a disagreement.
"""
import sys


def rows(path):
    with open(path) as f:
        return [[float(v) for v in line.split()] for line in f if line.strip()]


def argmax(r):
    best = 0
    for i, v in enumerate(r):
        if v > r[best]:
            best = i
    return best


def main():
    mode = sys.argv[1]
    ours, theirs = rows(sys.argv[2]), rows(sys.argv[3])
    tol = float(sys.argv[4])
    if mode == 'last':
        a = [r[0] for r in ours] if all(len(r) == 1 for r in ours) else ours[-1]
        b = [r[0] for r in theirs] if all(len(r) == 1 for r in theirs) else theirs[-1]
        if len(a) != len(b):
            print('lengths differ: %d and %d' % (len(a), len(b)))
            return 1
        diff = max(abs(x - y) for x, y in zip(a, b))
        ok = diff <= tol and argmax(a) == argmax(b)
        print('max |diff| %.3g (tolerance %g), argmax %d / %d' %
              (diff, tol, argmax(a), argmax(b)))
        return 0 if ok else 1
    n_prompt = int(sys.argv[5])
    if len(ours) != len(theirs):
        print('positions differ: %d and %d' % (len(ours), len(theirs)))
        return 1
    compared = close = bad = 0
    worst = 0.0
    for p in range(n_prompt - 1, len(theirs)):
        a, b = ours[p], theirs[p]
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
        top = sorted(b, reverse=True)
        if top[0] - top[1] <= 2 * tol:
            close += 1
            continue
        compared += 1
        if argmax(a) != argmax(b):
            bad += 1
            print('position %d: llama.cpp chose %d (margin %.3g), layermesh %d' %
                  (p, argmax(b), top[0] - top[1], argmax(a)))
    print('greedy: %d positions agree, %d within the margin of %g, %d disagree; '
          'max |diff| %.3g' % (compared - bad, close, 2 * tol, bad, worst))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
