"""Release sign-off: gates declared by a suite, evaluated on a run and its comparison, and the views a report shows."""
