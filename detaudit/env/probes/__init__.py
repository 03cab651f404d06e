"""Scripts run in the recipe's interpreter (not imported by the tool): the environment probe
and the doctor probe."""
