"""skrwatcher"""
