# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "1. GPU 인식 확인", "2. pytorch", device().
# Changed so that it can run at all: nothing (needs PyTorch).

import torch
torch.cuda.device(0)
