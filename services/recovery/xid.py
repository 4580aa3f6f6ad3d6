"""NVIDIA Xid error codes and what each means for the hardware: the one table recovery consults.

Source: NVIDIA, "Xid Errors" (docs.nvidia.com/deploy/xid-errors) and the GPU deployment and
management guide's recommended actions. Hardware faults retire the GPU or cordon the node;
application faults restart only the job. Codes not listed are treated as node faults, so an
unknown error drains the node for inspection rather than placing work on it again.
"""

from __future__ import annotations

from events.models import XidAction

XID_ACTIONS: dict[int, tuple[XidAction, str]] = {
    13: (XidAction.JOB_ONLY, "graphics engine exception (application fault)"),
    31: (XidAction.JOB_ONLY, "GPU memory page fault (application fault)"),
    43: (XidAction.JOB_ONLY, "GPU stopped processing (application fault)"),
    45: (XidAction.JOB_ONLY, "preemptive cleanup after an earlier error"),
    48: (XidAction.RETIRE_GPU, "double-bit ECC error"),
    63: (XidAction.RETIRE_GPU, "ECC page retirement or row remapping event"),
    64: (XidAction.RETIRE_GPU, "ECC page retirement or row remapping failure"),
    74: (XidAction.CORDON_NODE, "NVLink error"),
    79: (XidAction.CORDON_NODE, "GPU has fallen off the bus"),
    92: (XidAction.RETIRE_GPU, "high single-bit ECC error rate"),
    94: (XidAction.RETIRE_GPU, "contained ECC error"),
    95: (XidAction.RETIRE_GPU, "uncontained ECC error"),
}

UNKNOWN_XID = (XidAction.CORDON_NODE, "unclassified Xid: node drained for inspection")


def classify(xid: int) -> tuple[XidAction, str]:
    return XID_ACTIONS.get(xid, UNKNOWN_XID)
