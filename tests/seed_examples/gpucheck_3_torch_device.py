# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "3. …변환 방법", "2. pytorch", torch.device.
# Changed so that it can run at all: added `import torch`.

import torch

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
