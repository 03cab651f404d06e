"""Standards: the model (``standard``), the review of a change (``diff``) and the file
formats of other frameworks (``formats``)."""
