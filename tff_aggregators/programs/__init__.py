"""`tff.program` pieces for the methods here."""
