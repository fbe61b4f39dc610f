"""`agenttrain launch`: start a run's environment servers and memory service, run the
training, keep the services alive, and leave no process behind."""
