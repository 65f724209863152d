"""The frame processors, one module each behind ``base.Processor``; ``registry`` maps their names to them and
``chain`` runs them in the user's order after the shared face analysis."""
