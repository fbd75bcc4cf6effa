# The seed article's program (the pure-Python self-attention article attnlab grew from),
# reconstructed from the article's text for the tests.
#
# The article's text lost its '=' signs, quotes, '->' arrows, '+=' and docstring
# quotes; they are restored here and nothing else is changed: the same draws, the same
# loops, the same prints. The tests run this file as the oracle for `attnlab demo`.
# ============================================
# 纯 Python 实现自注意力（Self-Attention）
# ============================================
import math


def softmax(x: list) -> list:
    """计算 Softmax：把一组数变成概率分布（总和为 1）"""
    # 减去最大值防止数值溢出
    max_val = max(x)
    exp_x = [math.exp(v - max_val) for v in x]
    sum_exp = sum(exp_x)
    return [v / sum_exp for v in exp_x]


def matrix_multiply(A: list, B: list) -> list:
    """矩阵乘法：A 是 m×n，B 是 n×p，输出 m×p"""
    m = len(A)
    n = len(B)
    p = len(B[0])
    result = [[0.0 for _ in range(p)] for _ in range(m)]
    for i in range(m):
        for j in range(p):
            for k in range(n):
                result[i][j] += A[i][k] * B[k][j]
    return result


def transpose(matrix: list) -> list:
    """矩阵转置"""
    return list(map(list, zip(*matrix)))


class SelfAttention:
    """纯 Python 实现的自注意力层"""

    def __init__(self, d_model: int, d_k: int):
        """
        初始化自注意力层
        d_model: 输入/输出维度
        d_k: Q/K 的维度（通常 d_k = d_model / num_heads）
        """
        import random

        random.seed(42)  # runoob固定随机种子
        self.d_model = d_model
        self.d_k = d_k
        # 初始化 Q, K, V 的投影矩阵
        # 实际中这些是训练出来的
        self.Wq = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]
        self.Wk = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]
        self.Wv = [[random.normalvariate(0, 0.1) for _ in range(d_k)] for _ in range(d_model)]

    def forward(self, X: list) -> list:
        """
        自注意力前向传播
        X: 输入序列，形状 [seq_len, d_model]
        返回: 输出序列，形状 [seq_len, d_k]
        """
        seq_len = len(X)
        # 步骤 1：计算 Q, K, V
        # Q = X·Wq, K = X·Wk, V = X·Wv
        Q = matrix_multiply(X, self.Wq)
        K = matrix_multiply(X, self.Wk)
        V = matrix_multiply(X, self.Wv)
        print("  Q 的形状:", len(Q), "×", len(Q[0]))
        print("  K 的形状:", len(K), "×", len(K[0]))
        print("  V 的形状:", len(V), "×", len(V[0]))
        # 步骤 2：计算注意力分数 Q·Kᵀ
        K_transposed = transpose(K)
        scores = matrix_multiply(Q, K_transposed)
        print("\n  原始注意力分数:")
        for i, row in enumerate(scores):
            print(f"    第 {i} 行: {[f'{v:.4f}' for v in row]}")
        # 步骤 3：缩放（除以 √d_k）
        # 这是为了防止 Softmax 进入梯度饱和区
        scale_factor = math.sqrt(self.d_k)
        scores_scaled = [[v / scale_factor for v in row] for row in scores]
        print("\n  缩放后的注意力分数:")
        for i, row in enumerate(scores_scaled):
            print(f"    第 {i} 行: {[f'{v:.4f}' for v in row]}")
        # 步骤 4：Softmax 归一化
        attention_weights = []
        for row in scores_scaled:
            attention_weights.append(softmax(row))
        print("\n  注意力权重（Softmax 后）:")
        for i, row in enumerate(attention_weights):
            print(f"    第 {i} 行: {[f'{v:.4f}' for v in row]}")
        # 步骤 5：加权求和 V
        output = matrix_multiply(attention_weights, V)
        return output, attention_weights


# ============================================
# 演示：用一个简单例子运行自注意力
# ============================================
# 假设我们有一个 4 词的句子，每个词用 8 维向量表示
# 为了演示，我们用 one-hot + 小随机噪声
d_model = 8
d_k = 6
# 输入序列：4 个词，每个 8 维
X = [
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # 词 0
    [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # 词 1
    [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # 词 2
    [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],  # 词 3
]
print("=" * 50)
print("Runoob 自注意力演示")
print("=" * 50)
print(f"输入序列长度: {len(X)}")
print(f"输入维度: {len(X[0])}")
print()
attn = SelfAttention(d_model=d_model, d_k=d_k)
output, attention_weights = attn.forward(X)
print("\n" + "=" * 50)
print("自注意力输出:")
print("=" * 50)
for i, row in enumerate(output):
    print(f"词 {i} 的输出: {[f'{v:.4f}' for v in row]}")
