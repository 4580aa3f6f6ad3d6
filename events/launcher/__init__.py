"""What launcher tools write: job, team, cohort and priority-class documents (YAML) and the events they become."""
