-- Pandoc filter of the course site, used by Quarto (_quarto.yml lists it) and by
-- `tito site render --pandoc`. Generated into site/ by `tito site build` from
-- tito/site/templates/tinytorch.lua: edit it there.

-- Each table cell carries its column's header (data-label), so that a narrow screen can show
-- every row as a card of "header: value" lines instead of cutting columns off.
function Table(tbl)
  local heads = {}
  if #tbl.head.rows > 0 then
    for i, cell in ipairs(tbl.head.rows[1].cells) do
      heads[i] = pandoc.utils.stringify(cell.contents)
    end
  end
  for _, body in ipairs(tbl.bodies) do
    for _, row in ipairs(body.body) do
      for i, cell in ipairs(row.cells) do
        if heads[i] and heads[i] ~= "" then
          cell.attributes["data-label"] = heads[i]
        end
      end
    end
  end
  tbl.classes:insert("tt-cards")
  return tbl
end

-- Inline math and the punctuation right after it stay on one line: a browser may otherwise
-- break between a formula and its comma.
function Inlines(inlines)
  local out = pandoc.List()
  local i = 1
  while i <= #inlines do
    local el, after = inlines[i], inlines[i + 1]
    if el.t == "Math" and el.mathtype == "InlineMath" and after and after.t == "Str"
        and after.text:match("^[%.,;:%)!%?]") then
      out:insert(pandoc.Span({el, after}, {class = "tt-nobreak"}))
      i = i + 2
    else
      out:insert(el)
      i = i + 1
    end
  end
  return out
end
