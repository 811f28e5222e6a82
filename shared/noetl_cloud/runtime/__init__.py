"""The subscription runtime (Mode B): streaming pull, directives, dispatch, ack, rate governor."""
