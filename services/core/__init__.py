"""What the four deciders share: the decider protocol and the replica that runs one, gang placement, queue
order and quota fit, and the policy with its registry. No decider imports another; they meet here."""
