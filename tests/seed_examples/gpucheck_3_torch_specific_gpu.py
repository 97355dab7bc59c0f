# Seed 003_3f56375189cc27d1.txt ("GPU 서버에서 GPU 인식 확인 방법"), section "3. …변환 방법", "2. pytorch", a specific GPU.
# Changed so that it can run at all: added `import torch`; the `예) …` line (Korean prose: "e.g.") became a comment.

import torch

device = torch.device('cuda:{특정 GPU Index}' if torch.cuda.is_available() else 'cpu')

# 예) device = torch.device('cuda:1' if torch.cuda.is_available() else 'cpu')
