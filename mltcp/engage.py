"""The online switch: MLTCP acts on a flow only while doing so makes its iterations interleave.

MLTCP pays off when jobs can take turns: within a few iterations each one's communication runs
alone at line rate. Where they cannot (periods that do not fit, more communication than the link
carries), a more aggressive increase only moves the collision around and drops more. Each flow
therefore judges its own iterations, with no coordinator and no table:

* an iteration is *contended* when its busy time (first to last ACK, less the gaps inside it when
  the flow had nothing in flight, such as a framework's compute between its collectives) took more
  than ``contended_above`` x its bytes at the best delivery rate the flow has seen over busy time;
* engaged (the start), after every ``trial`` iterations: if most of them were contended, the
  interleaving did not form, and the flow disengages: it is then exactly its base algorithm;
* disengaged, it holds for ``hold`` iterations (``trial`` after an engagement that worked, doubled
  after each one that did not, up to ``hold_max``), then engages again at the next contended
  iteration: a job that joins, or one that leaves and frees a turn, is tried again.

The state is five columns of the tracker's array (:mod:`mltcp.tracker`), updated once per closed
iteration, lazily, the first time the hook asks after the close.
"""

from __future__ import annotations

from numba import njit

from .tracker import BEST_RATE, CONTENDED, ENGAGED, HISTORY, HOLD, IN_MODE, ITERATION, LAST_COMM, SEEN


@njit(cache=True)
def stretch(a, i):
    """Flow i's last closed iteration: its communication time over its bytes at the best rate
    seen (1 = as fast as the flow has ever delivered; 1 also before anything is known)."""
    rate, comm, sent = a[i, BEST_RATE], a[i, LAST_COMM], a[i, HISTORY]
    if rate <= 0.0 or comm <= 0.0 or not sent > 0.0:
        return 1.0
    return comm * rate / sent


@njit(cache=True)
def judge(a, i, trial, contended_above, hold_max):
    """The switch of flow i after one more closed iteration."""
    contended = stretch(a, i) > contended_above
    a[i, IN_MODE] += 1.0
    if a[i, ENGAGED] == 1.0:
        a[i, CONTENDED] += contended
        if a[i, IN_MODE] >= trial:
            if 2.0 * a[i, CONTENDED] > a[i, IN_MODE]:  # mostly contended: no interleaving formed
                a[i, ENGAGED] = 0.0
                a[i, HOLD] = min(max(2.0 * a[i, HOLD], trial), hold_max)
            else:
                a[i, HOLD] = 0.0
            a[i, IN_MODE] = 0.0
            a[i, CONTENDED] = 0.0
    elif a[i, IN_MODE] >= max(a[i, HOLD], 1.0) and contended:
        a[i, ENGAGED] = 1.0
        a[i, IN_MODE] = 0.0
        a[i, CONTENDED] = 0.0


@njit(cache=True)
def engaged(a, i, trial, contended_above, hold_max):
    """Whether MLTCP acts on flow i now (judging the iterations closed since the last call)."""
    if a[i, ITERATION] != a[i, SEEN]:
        a[i, SEEN] = a[i, ITERATION]
        judge(a, i, trial, contended_above, hold_max)
    return a[i, ENGAGED] == 1.0
