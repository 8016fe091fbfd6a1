: # placeholder
