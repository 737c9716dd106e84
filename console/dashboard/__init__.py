"""The fleet dashboard and the reads behind the admin's inspection pages."""
