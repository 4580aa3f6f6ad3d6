"""The four deciders (admitter, placer, preemptor, recovery), their policies, and the Kafka shell that runs them."""
