print('1..0 # SKIP stub')
