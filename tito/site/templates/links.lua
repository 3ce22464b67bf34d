-- `tito site render --pandoc` only: .qmd links become .html links, as Quarto does; links
-- elsewhere are left alone.
function Link(el)
  local target = el.target
  if target:match("^%a[%w+.-]*:") or target:sub(1, 1) == "#" then
    return el
  end
  local path, fragment = target:match("^([^#]*)(.*)$")
  if path:match("%.qmd$") then
    el.target = path:sub(1, -5) .. ".html" .. fragment
  end
  return el
end
