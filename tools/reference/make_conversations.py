#!/usr/bin/env python3
"""Write tests/fixtures/templates/conversations.json (stdlib only, deterministic).

    python3 tools/reference/make_conversations.py [OUT]

Format: {"version": 1, "conversations": [{"id", "description", "messages", "tools"?,
"extras": [ {...}, ... ]}]}. make_template_fixtures.py renders every conversation with
add_generation_prompt false and true, once per entry of "extras" (template kwargs such as
{"enable_thinking": false}; [{}] when absent).
"""
import json
import sys

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web. Returns the top results as text.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
        },
    },
}

C = []


def conv(description, messages, tools=None, extras=None):
    c = {"id": len(C), "description": description, "messages": messages}
    if tools is not None:
        c["tools"] = tools
    c["extras"] = extras if extras is not None else [{}]
    C.append(c)


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def s(text):
    return {"role": "system", "content": text}


conv("single user turn", [u("Hello! How are you?")])
conv("system + user", [s("You are a helpful assistant."), u("What is the capital of France?")])
conv("system + multi-turn ending with user",
     [s("You are a concise assistant."), u("Hi"), a("Hello! How can I help?"),
      u("Tell me a joke."), a("Why did the GPU cross the road? To reduce latency."),
      u("Another one, please.")])
conv("assistant last (continue / training form)",
     [u("Count to three."), a("One, two, three.")])
conv("unicode content",
     [u("Bonjour 👋🏽! 你好，世界。 مرحبا. Ünïcödé — ‘quotes’ … 🇯🇵 👨‍👩‍👧"),
      a("Salut ! こんにちは 😀 Ωμέγα ✓"), u("Ещё раз: ½ + ¼ = ¾ ✔︎")])
conv("empty contents", [s(""), u(""), a(""), u("")])
conv("whitespace-sensitive content (leading/trailing spaces and newlines)",
     [u("  padded question?  \n\n"), a("\n answer with newlines \n"), u("\tTabbed\ttext\t")])
conv("multi-line content with code",
     [u("Fix this:\n```python\ndef f(x):\n  return x+1\n```\nThanks."),
      a("Here:\n\n```python\ndef f(x):\n    return x + 1\n```"), u("And in C?")])
conv("special-token text inside content (must render verbatim)",
     [u("What do <|im_start|>, <s>, </s>, [INST], <|eot_id|> and <start_of_turn> mean?")])
conv("role alternation violated (two user turns)", [u("First."), u("Second.")])
conv("system only", [s("You are a helpful assistant.")])
conv("tools, no system message",
     [u("What's the weather in Paris?")], tools=[WEATHER_TOOL])
conv("tools with system message",
     [s("You are a weather bot."), u("Weather in Tokyo and Osaka, in fahrenheit?")],
     tools=[WEATHER_TOOL, SEARCH_TOOL])
conv("tool call round trip (arguments as object, two tool replies)",
     [s("You are a weather bot."),
      u("Compare the weather in Paris and Berlin."),
      {"role": "assistant", "content": "",
       "tool_calls": [
           {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
           {"id": "call_2", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
       "content": "{\"temperature\": 18, \"condition\": \"sunny\"}"},
      {"role": "tool", "tool_call_id": "call_2", "name": "get_weather",
       "content": "{\"temperature\": 12, \"condition\": \"rain\"}"}],
     tools=[WEATHER_TOOL])
conv("tool call with content and string arguments, then final answer and a new question",
     [u("Search for the tallest building."),
      {"role": "assistant", "content": "Let me search for that.",
       "tool_calls": [{"id": "call_a", "type": "function",
                       "function": {"name": "web_search",
                                    "arguments": "{\"query\": \"tallest building in the world\", \"max_results\": 3}"}}]},
      {"role": "tool", "tool_call_id": "call_a", "content": "Burj Khalifa, 828 m (Dubai)."},
      a("The tallest building is the Burj Khalifa (828 m)."),
      u("How tall is it in feet?")],
     tools=[SEARCH_TOOL])
conv("enable_thinking variants (Qwen3)",
     [u("What is 17 * 23?")],
     extras=[{}, {"enable_thinking": True}, {"enable_thinking": False}])
conv("assistant reasoning in history (<think> stripped from earlier turns)",
     [u("What is 2 + 2?"),
      a("<think>\nSimple arithmetic: 2 + 2 = 4.\n</think>\n\nThe answer is 4."),
      u("And 3 + 3?")],
     extras=[{}, {"enable_thinking": False}])
conv("assistant last with reasoning (kept for the final turn)",
     [u("Name a prime number."),
      a("<think>\nThe smallest prime is 2.\n</think>\n\n2 is a prime number.")])
conv("reasoning_content field on assistant message",
     [u("Is 9 prime?"),
      {"role": "assistant", "content": "No, 9 = 3 × 3.", "reasoning_content": "9 is divisible by 3."},
      u("Is 7 prime?")])
conv("multi-turn reasoning after a tool call",
     [u("Weather in Rome?"),
      {"role": "assistant", "content": "<think>\nI should call the tool.\n</think>\n\n",
       "tool_calls": [{"type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
      {"role": "tool", "content": "{\"temperature\": 25}"}],
     tools=[WEATHER_TOOL])
conv("content as a list of parts (OpenAI/multimodal form)",
     [{"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                   {"type": "text", "text": "In one sentence."}]}])
conv("long system prompt and three exchanges",
     [s("Rules:\n1. Be brief.\n2. Use metric units.\n3. Never guess."),
      u("Q1"), a("A1"), u("Q2"), a("A2"), u("Q3"), a("A3"), u("Q4")])

out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/templates/conversations.json"
with open(out, "w", encoding="utf-8") as f:
    json.dump({"version": 1, "generator": "tools/reference/make_conversations.py",
               "conversations": C}, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {len(C)} conversations to {out}")
