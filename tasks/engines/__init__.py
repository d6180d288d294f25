"""tasks/engines"""
