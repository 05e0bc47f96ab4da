"""The reader: its reading pre-training and data, the unit reader router's CV and fit, and ask's answer floors."""
