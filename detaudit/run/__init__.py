"""How a card becomes processes: the run plan, local process groups, Ray-job execution."""
