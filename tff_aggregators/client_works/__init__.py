"""Client work (`tff.learning.templates.ClientWorkProcess`) for methods that
need more from each client than its model delta."""
